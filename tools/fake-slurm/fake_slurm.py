#!/usr/bin/env python3
"""A scriptable fake of the Slurm client commands (stdlib only). See README.md.

Invoked through symlinks named sbatch, salloc, srun, squeue, scontrol, scancel, sacct;
the name it was called by selects the scenario section.
"""
import base64
import fcntl
import json
import os
import re
import signal
import sys
import time

COMMANDS = ("sbatch", "salloc", "srun", "squeue", "scontrol", "scancel", "sacct")
HERE = os.path.dirname(os.path.realpath(__file__))
DEFAULT_FIXTURES = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "fixtures", "slurm"))


def fail(msg, code=97):
    sys.stderr.write("fake-slurm: %s\n" % msg)
    sys.stderr.flush()
    sys.exit(code)


def append_locked(path, line):
    with open(path, "a", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(line + "\n")
        f.flush()
        fcntl.flock(f, fcntl.LOCK_UN)


def matches(resp, argv):
    if "argv" in resp and resp["argv"] != argv:
        return False
    for pattern in resp.get("match", []):
        rx = re.compile(pattern)
        if not any(rx.fullmatch(a) for a in argv):
            return False
    for pattern in resp.get("absent", []):
        rx = re.compile(pattern)
        if any(rx.fullmatch(a) for a in argv):
            return False
    return True


def choose(scenario, scenario_path, cmd, argv):
    """First response (in list order) that matches and has uses left. Uses are counted
    in a state file shared by all invocations, under an exclusive lock."""
    responses = scenario.get(cmd, [])
    state_path = os.environ.get("FAKE_SLURM_STATE") or scenario_path + ".state"
    with open(state_path, "a+", encoding="utf-8") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        text = f.read()
        used = json.loads(text) if text.strip() else {}
        chosen = None
        for i, resp in enumerate(responses):
            key = "%s:%d" % (cmd, i)
            times = resp.get("times")
            if times is not None and used.get(key, 0) >= times:
                continue
            if matches(resp, argv):
                used[key] = used.get(key, 0) + 1
                chosen = (i, resp)
                break
        f.seek(0)
        f.truncate()
        f.write(json.dumps(used))
        f.flush()
        fcntl.flock(f, fcntl.LOCK_UN)
    return chosen


def read_fixture(name):
    base = os.environ.get("FAKE_SLURM_FIXTURES") or DEFAULT_FIXTURES
    if not os.path.exists(os.path.join(base, name + ".exit")):
        fail("no fixture %s.exit in %s" % (name, base))

    def part(suffix):
        path = os.path.join(base, name + "." + suffix)
        return open(path, "rb").read() if os.path.exists(path) else b""

    code = part("exit").strip()
    return part("stdout"), part("stderr"), int(code) if code else 0


def payload(resp, stream, scenario_dir):
    if stream + "_b64" in resp:
        return base64.b64decode(resp[stream + "_b64"])
    if stream + "_file" in resp:
        path = os.path.join(scenario_dir, resp[stream + "_file"])
        return open(path, "rb").read()
    return resp.get(stream, "").encode("utf-8")


def act(cmd, argv, resp, scenario_dir):
    delay = float(resp.get("delay", 0))
    if delay > 0:
        time.sleep(delay)
    exit_code = int(resp.get("exit", 0))
    if "fixture" in resp:
        out, err, exit_code = read_fixture(resp["fixture"])
        exit_code = int(resp.get("exit", exit_code))
    else:
        out = payload(resp, "stdout", scenario_dir)
        err = payload(resp, "stderr", scenario_dir)
    out = out * int(resp.get("repeat", 1))
    sys.stdout.buffer.write(out)
    sys.stdout.buffer.flush()
    sys.stderr.buffer.write(err)
    sys.stderr.buffer.flush()
    if "touch" in resp:
        with open(resp["touch"], "a", encoding="utf-8") as f:
            f.write(json.dumps({"cmd": cmd, "argv": argv, "pid": os.getpid()}) + "\n")
    hang = float(resp.get("hang", 0))
    if hang > 0:
        time.sleep(hang)
    if "signal" in resp:
        os.kill(os.getpid(), int(resp["signal"]))
        time.sleep(5)
    sys.exit(exit_code)


def main():
    cmd = os.path.basename(sys.argv[0])
    argv = sys.argv[1:]
    if cmd not in COMMANDS:
        fail("called as %r; expected one of %s" % (cmd, ", ".join(COMMANDS)))
    scenario_path = os.environ.get("FAKE_SLURM_SCENARIO")
    if not scenario_path:
        fail("FAKE_SLURM_SCENARIO is not set")
    try:
        with open(scenario_path, encoding="utf-8") as f:
            scenario = json.load(f)
    except (OSError, ValueError) as e:
        fail("cannot read scenario %s: %s" % (scenario_path, e))
    chosen = choose(scenario, scenario_path, cmd, argv)
    log = os.environ.get("FAKE_SLURM_LOG")
    if log:
        record = {
            "cmd": cmd,
            "argv": argv,
            "pid": os.getpid(),
            "time": time.time(),
            "response": chosen[0] if chosen else None,
        }
        append_locked(log, json.dumps(record))
    if chosen is None and cmd == "scontrol" and argv[:1] == ["release"]:
        # Releasing a held job is a step of every session submit; a scenario that does not
        # script it means "it worked" (script a response to make it fail).
        sys.exit(0)
    if chosen is None:
        default = scenario.get("default")
        if default is None:
            fail("no scenario response for %s %s" % (cmd, json.dumps(argv)), code=98)
        resp = default
    else:
        resp = chosen[1]
    act(cmd, argv, resp, os.path.dirname(os.path.abspath(scenario_path)))


if __name__ == "__main__":
    # Die quietly on SIGTERM (what a timeout sends), as the real clients do.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main()
