"""Benchmark of the Crafter environment family: where a game rollout's time goes.

Measures, on this machine: world generation (reset) per world size, one env step headless vs
with Crafter's pixel rendering, one scripted-policy decision (parse the observation + plan), and
whole captured rollouts (local backend -> proxy -> harness -> artifacts). Prints a table and saves
`bench/results/crafter_rollout.json`. Run: `.venv/bin/python bench/crafter_rollout.py [--seeds 3]`.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="worlds per measurement (default 3)")
    parser.add_argument("--steps", type=int, default=200, help="env steps per step measurement (default 200)")
    args = parser.parse_args()


    from rollout_dataset.recipes.crafter.policy import crafter_actions
    from rollout_dataset.recipes.crafter import CrafterRolloutConfig, CrafterWorld, render_observation, run_crafter_rollout
    from rollout_dataset.recipes.crafter import world as world_module

    results: dict[str, object] = {"machine": platform.platform(), "python": platform.python_version(),
                                  "crafter": importlib.metadata.version("crafter")}
    reset: dict[str, float] = {}
    for area in ((32, 32), (64, 64)):
        times = []
        for seed in range(args.seeds):
            t = time.perf_counter()
            CrafterWorld(seed=seed, area=area, reuse_worlds=False).reset()
            times.append(time.perf_counter() - t)
        reset[f"{area[0]}x{area[1]}"] = _median_ms(times)
    CrafterWorld(seed=0, area=(64, 64)).reset()  # fills the world cache
    times = []
    for _ in range(args.seeds):
        t = time.perf_counter()
        CrafterWorld(seed=0, area=(64, 64)).reset()
        times.append(time.perf_counter() - t)
    reset["64x64 from the world cache"] = _median_ms(times)
    results["reset_ms_median"] = reset

    steps: dict[str, float] = {}
    for label, pixels in (("headless", False), ("pixels", True)):
        world = CrafterWorld(seed=0, max_steps=args.steps + 1, area=(32, 32), render_pixels=pixels)
        world.reset()
        times = []
        for i in range(args.steps):
            t = time.perf_counter()
            world.step([("move_left", "move_right", "do", "noop")[i % 4]])
            times.append(time.perf_counter() - t)
        steps[label] = _median_ms(times)
    results["step_ms_median"] = steps

    world = CrafterWorld(seed=1, max_steps=args.steps, area=(32, 32))
    state = world.reset()
    times = []
    while not state.done:
        text = render_observation(state)
        t = time.perf_counter()
        actions = crafter_actions([{"role": "user", "content": text}], seed=1)
        times.append(time.perf_counter() - t)
        state = world.step(actions).state
    results["policy_decision_ms_median"] = _median_ms(times)

    world_module._CACHE.clear()  # rollouts below generate their worlds (cold)
    rollouts = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            t = time.perf_counter()
            res = run_crafter_rollout(CrafterRolloutConfig(out_dir=Path(tmp) / str(seed), seed=seed, max_steps=60,
                                                           max_turns=20, area=(64, 64)))
            rollouts.append({"seed": seed, "wall_s": round(time.perf_counter() - t, 3),
                             "agent_turns": res.summary["agent_turns"],
                             "achievements": round(res.summary["env_reward"] * 22),
                             "timings": res.summary["timings"]})
    results["rollouts_64x64_60_steps_cold"] = rollouts

    print(f"{'measure':<44} value")
    for area, ms in reset.items():
        print(f"{'world reset ' + area + ' (ms, median)':<44} {ms}")
    for label, ms in steps.items():
        print(f"{'env step ' + label + ' (ms, median)':<44} {ms}")
    print(f"{'scripted policy decision (ms, median)':<44} {results['policy_decision_ms_median']}")
    for r in rollouts:
        print(f"{'rollout seed ' + str(r['seed']) + ' (s, turns, achievements)':<44} {r['wall_s']}, {r['agent_turns']}, {r['achievements']}")
    out = Path(__file__).resolve().parent / "results" / "crafter_rollout.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"saved {out}")


if __name__ == "__main__":
    main()
