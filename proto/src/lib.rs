//! The deskgym wire contract, generated from `proto/deskgym/v1/*.proto`.
//!
//! The `.proto` files are the single source of truth: this crate holds no logic, only the
//! generated messages, the `Deskgym` service trait (server) and its client.

#![allow(missing_docs, unreachable_pub, clippy::all)]

/// Version 1 of the deskgym protocol (`package deskgym.v1`).
pub mod v1 {
    tonic::include_proto!("deskgym.v1");
}
