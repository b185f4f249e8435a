"""Virtual-clock simulation: the real dispatcher on a FakeClock, an in-memory store and a model
endpoint (docs/simulate.md).

- ``scenario``: the TOML scenario, validated in one step (errors name the line and the key);
- ``load``, ``model``: the events of a run and the endpoint that answers them;
- ``setup``, ``observers``, ``run``: the store, what is watched on the engine, the run;
- ``report``: the report of a run;
- ``explain``: ``prefctl policy explain``, computed by the delivery policy.

    >>> report = simulate(load_scenario(Path("docs/examples/outage.toml")))
"""
