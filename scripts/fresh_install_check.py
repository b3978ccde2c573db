"""What the README tells a user to run, on the README's own install.

Run by ``scripts/fresh_install_test.sh`` with the Python of a virtualenv
made from nothing by the README's run command (``pip install -e
'.[embedded]'``, no ``dev`` extra): every ``boxoffice`` command's and
subcommand's ``--help`` (found by walking the help itself, so a new command
is covered), ``boxoffice simulate --model`` on a small scenario, then
``boxoffice up`` on free ports with its embedded stores, and against it
``boxoffice verify-draw`` on the demo event's published pre-queue proof and
``boxoffice report`` as JSON and as HTML on the database the banner names.
A package that only the ``dev`` extra brings (as httpx once was) fails one
of them with ``ModuleNotFoundError``. Standard library only.

    python scripts/fresh_install_check.py VENV WORKDIR
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

# A command that takes longer than this has hung.
COMMAND_SECONDS = 300
# `boxoffice up` from nothing: initdb, migrations, the demo event.
UP_SECONDS = 300


class Failed(Exception):
    """A command did not do what the README says."""


def user_environ(workdir: Path) -> dict[str, str]:
    """A new user's environment: nothing of the suite's or of this machine's
    boxoffice settings, no other virtualenv, no path into the checkout."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("BOXOFFICE_", "PG", "PYTHON", "VIRTUAL_ENV"))
        and key not in ("DATABASE_URL", "DATABASE_DIRECT_URL", "REDIS_URL")
    }
    env["HOME"] = str(workdir / "home")
    (workdir / "home").mkdir(exist_ok=True)
    return env


def run(boxoffice: Path, args: list[str], env: dict[str, str], cwd: Path, expect: int = 0) -> str:
    """``boxoffice ARGS``: its stdout, or Failed with what it printed."""
    try:
        done = subprocess.run(
            [str(boxoffice), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=COMMAND_SECONDS
        )
    except subprocess.TimeoutExpired:
        raise Failed(f"boxoffice {' '.join(args)}: no answer in {COMMAND_SECONDS} s") from None
    if done.returncode != expect:
        raise Failed(
            f"boxoffice {' '.join(args)} exited {done.returncode} (expected {expect}):\n"
            f"{done.stderr.strip()[-3000:]}\n{done.stdout.strip()[-1000:]}"
        )
    return done.stdout


def subcommands(help_text: str) -> list[str]:
    """The subcommands a help text lists: the entries indented four spaces
    under its positional arguments (argparse's layout of subparsers)."""
    found: list[str] = []
    inside = False
    for line in help_text.splitlines():
        if line.rstrip().endswith(":") and not line.startswith(" "):
            inside = line.startswith("positional arguments")
            continue
        match = re.match(r"^ {4}([a-z][a-z0-9-]*)(\s|$)", line)
        if inside and match:
            found.append(match.group(1))
    return found


def help_of(words: list[str]) -> tuple[object, str]:
    """``boxoffice WORDS --help`` through the installed command's ``main``,
    in this process: its exit code and what it printed."""
    import contextlib
    import io

    from boxoffice_cli.main import main as boxoffice_main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code: object = boxoffice_main([*words, "--help"])
        except SystemExit as exit_:
            code = exit_.code
    return code, out.getvalue()


def walk_help() -> int:
    """Every subcommand's ``--help`` below the top one, in this process
    (a process each would take seconds apiece); prints the commands shown."""
    pending: list[list[str]] = [[]]
    while pending:
        words = pending.pop(0)
        code, text = help_of(words)
        if code not in (0, None) or not text.startswith("usage:"):
            print(f"boxoffice {' '.join(words)} --help: exit {code}\n{text[:500]}", file=sys.stderr)
            return 1
        print(" ".join(words) or "(none)")
        pending.extend([*words, name] for name in subcommands(text))
    return 0


def every_help(boxoffice: Path, env: dict[str, str], cwd: Path) -> list[str]:
    """``--help`` of the installed ``boxoffice`` script, then of every
    command and subcommand in one process of the new virtualenv; the
    commands whose help was shown."""
    top = run(boxoffice, ["--help"], env, cwd)
    if not top.startswith("usage:"):
        raise Failed(f"boxoffice --help printed no usage:\n{top[:500]}")
    try:
        done = subprocess.run(
            [str(boxoffice.parent / "python"), __file__, "--walk-help"],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=COMMAND_SECONDS,
        )
    except subprocess.TimeoutExpired:
        raise Failed(f"the commands' --help: no answer in {COMMAND_SECONDS} s") from None
    if done.returncode != 0:
        raise Failed(f"a command's --help failed:\n{done.stderr.strip()[-3000:]}")
    return done.stdout.splitlines()


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def start_up(
    boxoffice: Path, env: dict[str, str], cwd: Path, workdir: Path
) -> tuple[subprocess.Popen[str], dict[str, str]]:
    """``boxoffice up`` on free ports; the process and its banner's lines
    by name (``postgres``, ``edge``, ...), once the demo event is made."""
    ports = dict(zip(("QUEUE", "BOOKING", "PAYMENT", "EDGE", "METRICS"), free_ports(5), strict=True))
    up_env = {**env, **{f"BOXOFFICE_{name}_PORT": str(port) for name, port in ports.items()}}
    up_env["BOXOFFICE_DATA_DIR"] = str(workdir / "data")
    log = (workdir / "up.log").open("w")
    process = subprocess.Popen(
        [str(boxoffice), "up"], env=up_env, cwd=cwd, stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1
    )
    assert process.stdout is not None
    banner: dict[str, str] = {}
    lines: list[str] = []
    deadline = time.monotonic() + UP_SECONDS
    while not any(line.startswith("  demo: ") for line in lines):
        left = deadline - time.monotonic()
        ready, _, _ = select.select([process.stdout], [], [], max(0.0, left))
        line = process.stdout.readline() if ready else ""
        if not line:
            process.kill()
            process.wait()
            tail = (workdir / "up.log").read_text(errors="replace")[-3000:]
            raise Failed(f"boxoffice up: no demo event in {UP_SECONDS} s or it ended:\n{''.join(lines)}\n{tail}")
        lines.append(line)
        match = re.match(r"^  ([a-z]+)\s+(\S+)", line)
        if match:
            banner.setdefault(match.group(1), match.group(2))
    return process, banner


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def revealed_within(url: str, *, seconds: float) -> None:
    """Wait until the proof document at ``url`` carries its seed; Failed
    with the last document otherwise."""
    deadline = time.monotonic() + seconds
    last = ""
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                last = reply.read().decode()
            if json.loads(last).get("seed"):
                return
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise Failed(f"the demo event's proof revealed no seed within {seconds:.0f} s:\n{last[:1000]}")
        time.sleep(0.5)


def check(venv: Path, workdir: Path) -> None:
    boxoffice = venv / "bin" / "boxoffice"
    env = user_environ(workdir)
    # Commands run from a directory of their own, as a user's would be.
    cwd = workdir / "cwd"
    cwd.mkdir(exist_ok=True)

    started = time.monotonic()
    helped = every_help(boxoffice, env, cwd)
    print(f"fresh install: --help of {len(helped)} commands ({time.monotonic() - started:.1f} s)", flush=True)

    started = time.monotonic()
    model = run(boxoffice, ["simulate", "--model", "--fans", "2000", "--seats", "200"], env, cwd)
    if "sold out after" not in model:
        raise Failed(f"boxoffice simulate --model printed no sell-out prediction:\n{model[:2000]}")
    print(f"fresh install: simulate --model ({time.monotonic() - started:.1f} s)", flush=True)

    started = time.monotonic()
    process, banner = start_up(boxoffice, env, cwd, workdir)
    try:
        print(f"fresh install: up ({time.monotonic() - started:.1f} s)", flush=True)
        for name in ("postgres", "edge", "queue", "booking", "payment", "metrics"):
            if name not in banner:
                raise Failed(f"boxoffice up's banner names no {name}: {banner}")
        proof = f"{banner['edge']}/v1/events/1/queue/proof"
        # The seed is revealed when the admitter opens the demo event's
        # pre-queue, a moment after up is ready (and the public document
        # may be cached for its max age): a user verifies once it is out.
        revealed_within(proof, seconds=60)
        verified = run(boxoffice, ["verify-draw", proof], env, cwd)
        if not verified.startswith("OK"):
            raise Failed(f"boxoffice verify-draw {proof} did not say OK:\n{verified[:2000]}")
        report_env = {**env, "DATABASE_URL": banner["postgres"]}
        as_json = json.loads(run(boxoffice, ["report", "1", "--format", "json"], report_env, cwd))
        if as_json.get("event_id") != 1 or "reconciliation" not in as_json:
            raise Failed(f"boxoffice report 1 --format json is not the report: {str(as_json)[:500]}")
        page = workdir / "report.html"
        run(boxoffice, ["report", "1", "--format", "html", "-o", str(page)], report_env, cwd)
        if not page.read_text().startswith("<!doctype html>"):
            raise Failed("boxoffice report 1 --format html wrote no page")
        print("fresh install: verify-draw and report (json, html) against up", flush=True)
    finally:
        stop(process)
    if process.returncode != 0:
        tail = (workdir / "up.log").read_text(errors="replace")[-3000:]
        raise Failed(f"boxoffice up exited {process.returncode} on SIGTERM:\n{tail}")


def main(argv: list[str]) -> int:
    if argv == ["--walk-help"]:
        return walk_help()
    if len(argv) != 2:
        print("usage: fresh_install_check.py VENV WORKDIR", file=sys.stderr)
        return 2
    try:
        check(Path(argv[0]), Path(argv[1]))
    except Failed as failed:
        print(f"fresh install: FAILED: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
