"""What the tests share besides fixtures: import it as ``tests.support.<module>``.

- ``polling``: wait for a condition with a deadline (``poll`` awaits it, ``wait_for`` calls it).
- ``cli``: run the ``kairos`` console entry point in this process and read its exit code and output.
- ``clocks``: a clock that moves only when a test moves it.
- ``memory_store``: an in-memory double of the store the services and the dispatcher call, held to
  the real store's behaviour by tests/integration/test_store_double_contract.py.
"""
