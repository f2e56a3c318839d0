"""The client side: the validated group API (``api.GroupApi``), its Ray transport
(``ray_client.RayGroupClient``), and the ``Consumer`` (``consumer``).
Importing this package loads no Ray: each module is imported where it is used."""
