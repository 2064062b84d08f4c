"""Amazon ECS, as far as the app uses it: the services of worker consumer groups, run as local processes."""
