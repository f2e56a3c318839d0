"""The member side of Kafka's classic group protocol, pure (no Ray, no I/O, no clock, no threads; an
import-linter contract keeps it so): what a consumer sends, and what it does with each answer.

``member.GroupMember`` is the state machine of one group member (Kafka's ``AbstractCoordinator`` and
``ConsumerCoordinator``): fed responses and the time, it returns the next requests and the listener
events. ``reactions`` holds one table per request type mapping each error code to what the member does
(retry, rediscover the coordinator, rejoin, reset its generation, fail). ``assignors`` are the client-side
partition assignors (range, roundrobin, sticky, cooperative-sticky). ``raygroups.Consumer`` is the
threaded shell around it.
"""
