#!/bin/bash
# The verifier: /app/solution.py on every held-out case of cases.json; reward = the fraction passed.
# -I: the working directory (/app, the agent's files) is not on sys.path, so no json.py of theirs
# is imported here; the cases are read, then removed before any solution runs
# a solution runs as the same user: one that writes a reward and kills this Python leaves reward 0
mkdir -p /logs/verifier
rm -f /logs/verifier/reward.txt /logs/verifier/reward.json
python3 -I - <<'PY' || { rm -f /logs/verifier/reward.txt /logs/verifier/reward.json; echo 0 > /logs/verifier/reward.txt; }
import json, os, subprocess, time
BUDGET_S = 40  # every case within this, well inside the task's 60 s verifier timeout: a slow solution scores 0, never a timeout
cases = json.load(open("/tests/cases.json"))
os.remove("/tests/cases.json")
deadline = time.monotonic() + BUDGET_S
passed = 0
for case in cases:
    left = deadline - time.monotonic()
    ok = False
    try:
        if left > 0:
            run = subprocess.run(["python3", "/app/solution.py"], input=case["input"], capture_output=True,
                                 text=True, timeout=min(10.0, left))
            ok = run.stdout.rstrip() == case["output"].rstrip()
    except subprocess.TimeoutExpired:
        ok = False
    passed += ok
    print("PASS" if ok else "FAIL")
for name in ("reward.txt", "reward.json"):  # a link or file the solution planted is replaced, not written through
    if os.path.lexists("/logs/verifier/" + name):
        os.remove("/logs/verifier/" + name)
open("/logs/verifier/reward.txt", "w").write(str(round(passed / len(cases), 4)))
PY
