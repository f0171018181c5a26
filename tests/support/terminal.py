#!/usr/bin/env python3
"""Runs a command on a terminal of its own (a pseudo-terminal), as a user at a shell would, and answers each
prompt named on the command line with its answer: `terminal.py PROMPT ANSWER -- command args…`. What the command
prints (stdout and stderr, as a terminal mixes them) is copied to stdout; the exit status is the command's."""

import os
import pty
import sys


def main():
    split = sys.argv.index("--")
    pairs = sys.argv[1:split]
    prompts = {pairs[i].encode(): pairs[i + 1].encode() + b"\n" for i in range(0, len(pairs), 2)}
    pid, fd = pty.fork()
    if pid == 0:
        os.execvp(sys.argv[split + 1], sys.argv[split + 1:])
    seen = b""
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:  # EIO: the command and everything it started closed the terminal
            break
        if not data:
            break
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        seen = (seen + data)[-4096:]
        for prompt, answer in prompts.items():
            if seen.endswith(prompt):
                os.write(fd, answer)
                seen = b""
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
