//! Notifiers: email (lettre SMTP) and webhooks, fed by the durable outbox in the store.
//!
//! Must not: send to any address or URL that is not in the configuration.
