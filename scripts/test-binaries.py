#!/usr/bin/env python3
"""Builds the workspace's test binaries (`cargo test ARGS --no-run`) and runs
them JOBS at a time (env KILN_TEST_JOBS, default 2), the longest first by the
times the last run kept beside Cargo's build directory. Most binaries keep
about one core busy (an adapter compiling a kernel on one thread), so two at
a time fill a two-core machine; the tests do not time themselves, so a busy
machine changes only how long they take.

Each binary runs in its package's folder, as cargo runs it. Its output is
printed whole when it ends, after the line cargo prints for it
("     Running tests/x.rs (path)"), so the log reads as cargo test's. Appends
"SECONDS LABEL" for each binary to $KILN_BINARY_TIMES when that is set.
Exits non-zero when a binary failed, naming each. `--exclude-test NAME`
leaves out the integration test NAME (built, not run); `--also LABEL=COMMAND`
runs a shell command from the repository's root as one more job (one that
needs the binaries built, such as the browser e2e).
"""

import functools
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

# A binary the last run did not time is ordered as if this slow; a command
# given with --also (the browser e2e's parts: minutes each), as if slower.
UNTIMED_SECONDS = 60.0
UNTIMED_COMMAND_SECONDS = 600.0


def test_binaries(cargo_args, excluded):
    """(label, executable, package folder) of each test binary, built, but
    the integration tests named in `excluded`."""
    cmd = ["cargo", "test", *cargo_args, "--no-run", "--message-format=json-render-diagnostics"]
    built = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if built.returncode != 0:
        sys.exit(f"test-binaries: `{' '.join(cmd)}` failed (exit {built.returncode})")
    found = []
    for line in built.stdout.splitlines():
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable") or not msg["profile"]["test"]:
            continue
        if msg["target"]["kind"] == ["test"] and msg["target"]["name"] in excluded:
            continue
        folder = os.path.dirname(msg["manifest_path"])
        source = os.path.relpath(msg["target"]["src_path"], folder)
        kind = "unittests " if msg["target"]["kind"] != ["test"] else ""
        found.append((f"{kind}{source} ({msg['executable']})", msg["executable"], folder))
    return found


@functools.cache
def toolchain_libraries():
    """The toolchain's libraries for the host (libstd as a shared library)."""
    sysroot = subprocess.run(["rustc", "--print", "sysroot"], stdout=subprocess.PIPE, text=True).stdout.strip()
    version = subprocess.run(["rustc", "-vV"], stdout=subprocess.PIPE, text=True).stdout
    host = next(line.split(": ", 1)[1] for line in version.splitlines() if line.startswith("host: "))
    return os.path.join(sysroot, "lib", "rustlib", host, "lib")


def library_path(executable):
    """LD_LIBRARY_PATH as cargo gives a test binary: its own folder and the
    toolchain's libraries (a proc-macro crate's tests link libstd
    dynamically), before the caller's."""
    dirs = [os.path.dirname(executable), toolchain_libraries()]
    return os.pathsep.join(dirs + [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p])


def times_file():
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(os.getcwd(), "target")
    return os.path.join(target, "kiln-test-times.tsv")


def read_times():
    try:
        with open(times_file()) as f:
            rows = (line.rstrip("\n").split("\t", 1) for line in f)
            return {name: float(seconds) for seconds, name in rows}
    except (OSError, ValueError):
        return {}


def name_of(label):
    """A binary's label without its hash, so that times outlive rebuilds."""
    if " (" not in label:
        return label
    source, path = label.split(" (", 1)
    return f"{source} {os.path.basename(path).rsplit('-', 1)[0]}"


def main():
    jobs = int(os.environ.get("KILN_TEST_JOBS", "2"))
    args, excluded, also = sys.argv[1:], set(), []
    for flag in ("--exclude-test", "--also"):
        while flag in args:
            i = args.index(flag)
            value, args = args[i + 1], args[:i] + args[i + 2 :]
            if flag == "--also":
                label, command = value.split("=", 1)
                also.append((label, ["bash", "-c", command], os.getcwd()))
            else:
                excluded.add(value)
    binaries = test_binaries(args, excluded) + also
    last = read_times()
    untimed = {label: UNTIMED_COMMAND_SECONDS for label, _, _ in also}
    binaries.sort(key=lambda b: -last.get(name_of(b[0]), untimed.get(b[0], UNTIMED_SECONDS)))
    lock = threading.Lock()
    started = time.monotonic()
    took, failed = {}, []

    def run(binary):
        label, command, folder = binary
        t0 = time.monotonic()
        env = dict(os.environ)
        if not isinstance(command, list):
            env["LD_LIBRARY_PATH"] = library_path(command)
            command = [command]
        out = subprocess.run(command, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        seconds = time.monotonic() - t0
        with lock:
            took[name_of(label)] = seconds
            print(f"[+{time.monotonic() - started:.0f} s]      Running {label}", flush=True)
            sys.stdout.buffer.write(out.stdout)
            print(f"[{label.split(' (')[0]}: {seconds:.0f} s, exit {out.returncode}]", flush=True)
            if out.returncode != 0:
                failed.append(label)
            times = os.environ.get("KILN_BINARY_TIMES")
            if times:
                with open(times, "a") as f:
                    f.write(f"{seconds:.0f} {label}\n")

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(run, binaries))
    try:
        os.makedirs(os.path.dirname(times_file()), exist_ok=True)
        with open(times_file(), "w") as f:
            f.writelines(f"{s:.1f}\t{n}\n" for n, s in {**last, **took}.items())
    except OSError as e:
        print(f"test-binaries: cannot keep the times ({e})", file=sys.stderr)
    print(f"test binaries: {len(binaries)} run {jobs} at a time in {time.monotonic() - started:.0f} s")
    if failed:
        print("failed test binaries:\n" + "\n".join(f"  {label}" for label in failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
