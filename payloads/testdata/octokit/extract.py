#!/usr/bin/env python3
"""Extract a small subset of @octokit/webhooks-examples into one file per example.

Usage:
    npm pack @octokit/webhooks-examples@7.6.1 && tar xzf octokit-webhooks-examples-7.6.1.tgz
    python3 extract.py package/api.github.com/index.json .

Each selected example is written as {event}.{action or none}.{n}.json, where n is the
example's 0-based position among the package's examples of the same event and action,
so a file can always be traced back to the package. The payload is written unchanged
(same keys, key order and values), re-indented with two spaces.
"""

import json
import os
import sys

# event -> {action ("none" for events without one): [n, ...]}
SELECTION = {
    "pull_request": {
        "opened": [0],
        "synchronize": [0],
        "closed": [0],
        "reopened": [0],
        "labeled": [0],
        "ready_for_review": [0],
        "converted_to_draft": [0],
    },
    "pull_request_review": {"submitted": [0], "dismissed": [0]},
    "pull_request_review_comment": {"created": [0], "edited": [0], "deleted": [0]},
    "issues": {"opened": [0], "edited": [0], "reopened": [0], "labeled": [0], "deleted": [0]},
    "issue_comment": {"created": [0], "edited": [0], "deleted": [0]},
    "commit_comment": {"created": [0]},
    "push": {"none": [0, 4]},
    "create": {"none": [0]},
    "delete": {"none": [0]},
    "installation": {"created": [0], "deleted": [0], "suspend": [0], "unsuspend": [0]},
    "installation_repositories": {"added": [0], "removed": [0]},
    "repository": {"created": [0], "edited": [0], "renamed": [0], "privatized": [0], "publicized": [0]},
    # Events the service has no table for: they must be acknowledged and ignored.
    "check_run": {"created": [0], "completed": [0]},
    "workflow_run": {"completed": [0]},
}


def reject_float(text):
    # Python would re-print a float differently from the package (5.50 -> 5.5);
    # the selected events carry none, so refuse rather than alter a value.
    raise ValueError("float %s in a selected payload" % text)


def main(index_path, out_dir):
    with open(index_path, encoding="utf-8") as f:
        webhooks = json.load(f)
    by_event = {w["name"]: w["examples"] for w in webhooks}
    written = 0
    for event, actions in SELECTION.items():
        seen = {}
        for example in by_event[event]:
            action = example.get("action", "none")
            n = seen.get(action, 0)
            seen[action] = n + 1
            if n not in actions.get(action, []):
                continue
            # Round-trip through the parser with floats refused, so the file is the
            # package's payload value for value.
            text = json.dumps(example, indent=2, ensure_ascii=False) + "\n"
            json.loads(text, parse_float=reject_float)
            name = "%s.%s.%d.json" % (event, action, n)
            with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
                f.write(text)
            written += 1
        for action, wanted in actions.items():
            missing = [n for n in wanted if n >= seen.get(action, 0)]
            if missing:
                sys.exit("%s.%s: no example(s) %s in the package" % (event, action, missing))
    print("wrote %d files" % written)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: extract.py INDEX_JSON OUT_DIR")
    main(sys.argv[1], sys.argv[2])
