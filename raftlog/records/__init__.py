"""What a batch's payload is, to every writer and reader: its layouts (plain and keyed,
``framing``), its codecs (``compression``) and the check a node makes on produce
(``payload_check``). Shared by the client, the node, the Kafka listener and the
connector; it imports nothing of the project but ``raftlog.storage``."""
