//! Mailbox cursors and poller leases: what lets exactly one replica read each mailbox, from
//! where the last one stopped.
