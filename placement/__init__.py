"""Where partitions live and who leads them: ``plan`` (initial placement), ``decide`` (the controller's pure
decisions: ``decide(metadata, observations, now_ms) -> Decision``), ``model`` (their data), ``requests``
(the leaders' requests), ``nodes`` (coordinator nodes by stable name), and ``controller`` (the thin Ray
actor that observes, decides and performs).
"""
