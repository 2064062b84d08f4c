"""The local handlers' sandbox: a process that cannot write, remount or mount the repository.

    argv = sandbox.wrap([python, "-I", worker], tmp_mb=512, keep=[code_dir, *layers], cwd=code_dir)
    sandbox.refused()      # why this machine cannot sandbox (None: it can), for `up` and `status`

Every process the local runtime starts to run team code (a Lambda worker, a local ECS worker task,
the redrive worker) is started through this file, run by path (`python -I -S sandbox.py <spec>
<argv...>`: standard library only). Before it executes the handler's program in its own place (the
same pid), it:

1. enters a user namespace with an unprivileged map — the caller's own uid and gid only, as any
   user may write — and a mount namespace of its own (`unshare(CLONE_NEWUSER | CLONE_NEWNS)`);
2. makes every mount read-only (`mount_setattr(AT_RECURSIVE)`), so the repository, its venv,
   `.local` and `cdk.out` answer EROFS, as everything but /tmp does in Lambda;
3. mounts a private /tmp of `tmp_mb` megabytes (a full one answers ENOSPC), then binds back into it,
   read-only, the folders of `keep` that live under the host's /tmp (a project copied there) —
   each widened to its project folder (the nearest with `cdk.json`, `pyproject.toml` or `.git`);
4. drops its power for good: an empty capability bounding set, no ambient, inheritable, permitted
   or effective capabilities, the root-is-not-special secure bits locked, and PR_SET_NO_NEW_PRIVS.
   A remount or a mount then answers EPERM, a write EROFS, as in Lambda.

What stays: the files opened before (the log, the connection to the runtime), reading the code,
layers and the interpreter's folders, the network. Where the kernel refuses a user namespace
(`/proc/sys/user/max_user_namespaces` 0, Debian's `kernel.unprivileged_userns_clone` 0, Ubuntu's
AppArmor `kernel.apparmor_restrict_unprivileged_userns` 1) `refused()` says which, and the runtime
starts the handlers without the sandbox and says so (`up`, `status`). The handler keeps the caller's
uid, but not its reach: a process outside its namespace (the runtime, the developer's shell) is not
its to trace, so its `/proc/<pid>/root` is refused (EACCES).
"""

from __future__ import annotations

import json
import os
import sys

__all__ = ["NOT_ENFORCED", "Spec", "command", "describe", "refused", "wrap"]

#: typing.TYPE_CHECKING without importing typing: run by path, this file imports the standard library only.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import TypedDict

    class Spec(TypedDict):
        """What one sandboxed process gets: its /tmp's size, the folders it reads, its working folder."""

        tmp_mb: int
        keep: list[str]
        cwd: str
        shm: bool  # /dev/shm stays writable (a container has one; Lambda has none)

else:

    def Spec(**fields: object) -> dict[str, object]:  # the TypedDict's name at run time
        return dict(fields)


_CLONE_NEWNS, _CLONE_NEWUSER = 0x00020000, 0x10000000
_MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC, _MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_NOSUID = 0x1, 0x2
_AT_FDCWD, _AT_RECURSIVE = -100, 0x8000
_SYS_MOUNT_SETATTR = 442  # the same number on every architecture (new syscalls are unified)
_PR_CAPBSET_DROP, _PR_SET_SECUREBITS, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT = 24, 28, 38, 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
#: SECBIT_NOROOT, SECBIT_NO_SETUID_FIXUP, SECBIT_KEEP_CAPS off, SECBIT_NO_CAP_AMBIENT_RAISE, each locked.
_SECUREBITS = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80
_PROJECT_MARKERS = ("cdk.json", "pyproject.toml", ".git")
_REFUSALS = (  # (sysctl, the value that refuses, what it means)
    ("/proc/sys/user/max_user_namespaces", "0", "user namespaces are off"),
    ("/proc/sys/kernel/unprivileged_userns_clone", "0", "unprivileged user namespaces are off"),
    (
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        "1",
        "AppArmor restricts unprivileged user namespaces",
    ),
)
REFUSED = "local runtime: sandbox refused: "
#: What a handler can do when the sandbox is refused: said with the reason.
NOT_ENFORCED = "the handler can write the repository, remount its code read-write and mount"


def command(spec: Spec, argv: list[str]) -> list[str]:
    """The command line that runs `argv` sandboxed (see the module's description)."""
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), json.dumps(spec), *argv]


def wrap(argv: list[str], *, tmp_mb: int, keep: list[str], cwd: str, shm: bool = False) -> list[str]:
    """`argv` sandboxed: a /tmp of `tmp_mb` MB, `keep` (the folders it reads) visible and read-only,
    `cwd` its working folder; `argv` itself where the machine refuses (`refused()` says why).
    What the program needs to start is kept too: the folder this runtime is imported from (a venv
    of a team's, installed under /tmp, holds `worker.py`) and the folder of every file `argv` names."""
    if refused() is not None:
        return argv
    named = [os.path.dirname(arg) for arg in argv if os.path.isabs(arg) and os.path.isfile(arg)]
    return command(Spec(tmp_mb=tmp_mb, keep=[*keep, _import_root(), *named], cwd=cwd, shm=shm), argv)


def _import_root() -> str:
    """The folder the runtime's top package is imported from: this repository, or site-packages."""
    folder = os.path.dirname(os.path.abspath(__file__))
    while os.path.exists(os.path.join(folder, "__init__.py")):
        folder = os.path.dirname(folder)
    return folder


_refusal: list[str | None] = []


def refused() -> str | None:
    """Why this machine refuses the sandbox — the kernel's setting named, and what is then not
    enforced — or None when it sandboxes. Found once per process by a probe that sandboxes itself
    (two threads asking at once may both probe: the same answer, kept once)."""
    if not _refusal:
        import subprocess

        probe = command(Spec(tmp_mb=1, keep=[], cwd="/", shm=False), ["--probe"])
        done = subprocess.run(probe, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
        said = done.stderr.strip().removeprefix(REFUSED)
        _refusal.append((said or f"exit status {done.returncode}") if done.returncode else None)
    reason = _refusal[0]
    return f"{reason}: {NOT_ENFORCED}" if reason else None


def describe() -> str:
    """One line for `up`: what the handlers run without, or that they are not sandboxed and why."""
    reason = refused()
    if reason is not None:
        return f"NOT sandboxed: {reason}"
    return (
        "sandboxed: a user namespace mapping uid and gid "
        f"{os.getuid()}:{os.getgid()} only, no capabilities, everything but a private /tmp read-only"
    )


def machine_setting() -> str:
    """The kernel setting that refuses user namespaces, or ''."""
    for path, value, meaning in _REFUSALS:
        try:
            with open(path) as setting:
                if setting.read().strip() == value:
                    return f"{meaning} ({path} is {value})"
        except OSError:
            continue
    return ""


def project_folder(folder: str) -> str:
    """`folder`'s project: the nearest folder above it (or itself) with a project marker, below /tmp."""
    candidate = folder
    while candidate not in ("/", "/tmp"):
        if any(os.path.exists(os.path.join(candidate, marker)) for marker in _PROJECT_MARKERS):
            return candidate
        candidate = os.path.dirname(candidate)
    return folder


def enter(spec: Spec) -> None:
    """Steps 1 to 4 of the module's description, in this process; OSError when refused."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.syscall.restype = ctypes.c_long

    def check(result: int, what: str) -> None:
        if result != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"{what}: {os.strerror(errno)}")

    class MountAttr(ctypes.Structure):
        _fields_ = [(name, ctypes.c_uint64) for name in ("set", "clr", "propagation", "userns_fd")]

    def set_attributes(path: str, set_flags: int, clear_flags: int = 0) -> None:
        attr = MountAttr(set_flags, clear_flags, 0, 0)
        result = libc.syscall(
            _SYS_MOUNT_SETATTR,
            _AT_FDCWD,
            path.encode(),
            _AT_RECURSIVE,
            ctypes.byref(attr),
            ctypes.sizeof(attr),
        )
        check(int(result), f"mount_setattr {path}")

    uid, gid = os.getuid(), os.getgid()
    folders = {project_folder(os.path.realpath(folder)) for folder in spec["keep"]}  # seen from the host
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS) != 0:
        errno = ctypes.get_errno()
        setting = machine_setting()
        raise OSError(
            errno,
            f"unshare(CLONE_NEWUSER|CLONE_NEWNS): {os.strerror(errno)}" + (f": {setting}" if setting else ""),
        )
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as map_file:
            map_file.write(text)
    check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
    host_tmp = os.open("/tmp", os.O_PATH | os.O_DIRECTORY)  # the host's /tmp, for the binds back
    set_attributes("/", _MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID)
    if spec["shm"] and os.path.isdir("/dev/shm"):
        set_attributes("/dev/shm", 0, _MOUNT_ATTR_RDONLY)
    options = f"size={spec['tmp_mb']}m,mode=1777".encode()
    check(libc.mount(b"tmpfs", b"/tmp", b"tmpfs", _MS_NOSUID | _MS_NODEV, options), "mount tmpfs /tmp")
    for folder in sorted(folder for folder in folders if folder.startswith("/tmp/")):
        os.makedirs(folder, exist_ok=True)
        source = f"/proc/self/fd/{host_tmp}/{os.path.relpath(folder, '/tmp')}"
        check(libc.mount(source.encode(), folder.encode(), None, _MS_BIND | _MS_REC, None), f"bind {folder}")
        set_attributes(folder, _MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID)
    os.close(host_tmp)
    os.chdir(spec["cwd"])  # the folder it was started in, now its read-only mount
    drop(libc)


def drop(libc: object) -> None:
    """No capability now or after exec, in this namespace or any it creates; no privilege gained by exec."""
    import ctypes

    assert isinstance(libc, ctypes.CDLL)
    if libc.prctl(_PR_SET_SECUREBITS, _SECUREBITS, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl(PR_SET_SECUREBITS): {os.strerror(ctypes.get_errno())}")
    with open("/proc/sys/kernel/cap_last_cap") as last:
        for capability in range(int(last.read()) + 1):
            if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), f"PR_CAPBSET_DROP {capability}")
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable (two words each): none
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), f"capset: {os.strerror(ctypes.get_errno())}")
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}")


def main() -> None:
    spec: Spec = json.loads(sys.argv[1])
    argv = sys.argv[2:]
    try:
        enter(spec)
    except OSError as exc:
        sys.stderr.write(f"{REFUSED}{exc.strerror or exc}\n")
        sys.exit(126)
    if argv == ["--probe"]:
        sys.exit(0)
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
