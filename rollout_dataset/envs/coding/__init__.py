"""The built-in coding environment (`CodingEnvironment` in `env.py`): a task of a task set
(`rollout_dataset.tasks`), a harness (`rollout_dataset.harness`) in the allow-list sandbox and the
verifier (`rollout_dataset.sandbox`), behind the `Environment` seam. Also here: the statement every
harness gets (`statement.py`), the examples as achievements and the trace replay for stepwise
rewards (`replay.py`), and the local backend's `oracle` player (`policy.py`, registered on import).
"""
