"""CloudWatch on one machine: the metrics the deployed app would see, its alarms, its dashboard's data.

metrics     the store: datapoints at one-second resolution, queried by statistic and period
statistics  Sum, Average, Minimum, Maximum, SampleCount, pNN, as CloudWatch computes them
emf         the functions' Embedded Metric Format lines, extracted as CloudWatch extracts them
sources     what feeds the store: function logs (EMF), the endpoint's service metrics, queue depths
alarms      the template's alarms, evaluated on the store (periods, datapoints to alarm, missing data)
insights    the subset of Logs Insights that the dashboard's log widget queries
"""
