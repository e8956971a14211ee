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


def is_update(cmd, argv):
    return cmd == "scontrol" and argv[:1] == ["update"]


def names_update(resp):
    """A response serves `scontrol update` only when it says so (`argv`, or a `match` of
    `update`): a scenario's catch-all `show job` answer must not swallow a comment."""
    return resp.get("argv", [None])[:1] == ["update"] or "update" in resp.get("match", [])


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
            if is_update(cmd, argv) and not names_update(resp):
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


def comments_path(scenario_path):
    return (os.environ.get("FAKE_SLURM_STATE") or scenario_path + ".state") + ".comments"


def load_comments(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def set_comment(path, argv):
    """`scontrol update JobId=J Comment=TEXT` that no response scripts: the controller keeps
    the comment, as Slurm does, and every later `show job` of J prints it."""
    job = next((a[len("JobId="):] for a in argv if a.startswith("JobId=")), None)
    text = next((a[len("Comment="):] for a in argv if a.startswith("Comment=")), None)
    if job is None or text is None:
        fail("scontrol update without JobId= and Comment=: %s" % json.dumps(argv), code=98)
    with open(path + ".lock", "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        comments = load_comments(path)
        comments[job] = text
        with open(path, "w", encoding="utf-8") as f:
            json.dump(comments, f)
    sys.exit(0)


def with_comments(out, comments):
    """`show job` lines of a job whose comment was set get ` Comment=TEXT` (unless the
    scenario's line has its own)."""
    if not comments:
        return out
    lines = out.decode("utf-8", "replace").split("\n")
    for i, line in enumerate(lines):
        m = re.match(r"JobId=(\d+) ", line)
        if m and m.group(1) in comments and " Comment=" not in line:
            lines[i] = line.rstrip(" ") + " Comment=" + comments[m.group(1)]
    return "\n".join(lines).encode("utf-8")


def act(cmd, argv, resp, scenario_dir, comments=None):
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
    if cmd == "scontrol" and "show" in argv and "job" in argv:
        out = with_comments(out, comments)
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
    if chosen is None and is_update(cmd, argv):
        set_comment(comments_path(scenario_path), argv)
    if chosen is None:
        default = scenario.get("default")
        if default is None:
            fail("no scenario response for %s %s" % (cmd, json.dumps(argv)), code=98)
        resp = default
    else:
        resp = chosen[1]
    comments = load_comments(comments_path(scenario_path))
    act(cmd, argv, resp, os.path.dirname(os.path.abspath(scenario_path)), comments)


if __name__ == "__main__":
    # Die quietly on SIGTERM (what a timeout sends), as the real clients do.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main()
