#!/usr/bin/env python3
"""An example decider for `git steps run --decider`.

The protocol: git-steps runs this command (through `sh -c`, in the
worktree) once per step it needs a decision for, with a JSON context on
stdin:

    {"run": "main", "step_index": 0, "head": null | "<commit>",
     "fingerprint": "sha256:...", "last_step_id": null | "<id>",
     "refused": {"step_id": ..., "reason": ...}   # only after a refusal}

and reads ONE step object from stdout (any format from the SPEC: `files`,
`patch`, ...), or {"done": true}. Exit non-zero (or print garbage) and
nothing is recorded: the run stops with exit 1 and the next run asks again.

git-steps makes each answer durable with its step, in one push (the step's
receipt records it), so after a crash it never asks again for a step that
has a receipt; an answer lost before that push is asked for again. A refused
answer comes back at once with `refused` (up to `--retries` times). Step ids
must be new for each decision: derive them from `step_index`.

This example works through TODO.txt in the repository, one item per step,
marking the first open item (`- [ ] ...`) done. Replace `decide()` with a
call to your model: give it the context and the files it needs, and turn
its tool call into a step.
"""
import json
import sys


def decide(ctx):
    try:
        with open("TODO.txt", encoding="utf-8") as f:
            lines = f.read().splitlines(keepends=True)
    except FileNotFoundError:
        return {"done": True}
    for n, line in enumerate(lines):
        if line.startswith("- [ ] "):
            item = line[len("- [ ] "):].strip()
            lines[n] = "- [x] " + line[len("- [ ] "):]
            return {
                # The index makes the id unique within the run.
                "id": "todo-%d" % ctx["step_index"],
                "message": "done: " + item,
                "intent": {"tool": "mark_done", "item": item},
                "files": {"TODO.txt": "".join(lines)},
            }
    return {"done": True}


def main():
    ctx = json.load(sys.stdin)
    if ctx.get("refused"):
        # Our previous answer for this index was refused; say why and stop.
        print("refused: %s" % ctx["refused"]["reason"], file=sys.stderr)
        return 1
    print(json.dumps(decide(ctx)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
