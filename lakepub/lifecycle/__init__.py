"""A dataset's life after its definition: its published state for schedulers and sensors
(``state``, ``sensor``), soft deletion and its undoing (``retirement``), and the janitor's hard
delete after a grace period (``hard_delete``, with the datasets downstream from ``graph``).

Not to be confused with ``lakepub/contract/lifecycle.py``, the life of a contract version.
"""
