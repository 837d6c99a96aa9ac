//! Port tunnels: a TCP port on an env's own loopback (inside its sandbox, which has its
//! own network namespace) carried over a gRPC stream, so a client on another machine
//! reaches that env's browser debugging port and no other env's.
//!
//! The server connects to the env's sandbox agent (its Unix socket), asks it to
//! `Connect` to the port and then only moves bytes: async I/O on both sides, no
//! blocking thread, no lock, no hold on the env's flight (a tunnel runs beside steps).
//! The connection ends when either side ends; a reset or close of the env ends the
//! sandbox, its agent and so every tunnel into it.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use deskgym_proto::v1 as pb;
use deskgym_worker::AgentPeer;
use deskgym_worker::{AgentReply as Reply, AgentRequest as Request};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tonic::Status;

use crate::env::EnvError;

/// How long the agent may take to answer a `Connect` (it waits 5 s for the port).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes per message towards the client.
const CHUNK: usize = 64 * 1024;
/// Messages buffered towards the client before reading the port waits for it.
const QUEUE: usize = 16;
/// The longest reply line the agent sends to a `Connect`.
const MAX_REPLY_LINE: usize = 4096;

/// A connection into the sandbox, ready to carry bytes.
pub(crate) struct Open {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

/// Connects to `port` on the sandbox's loopback through the agent at `socket`.
pub(crate) async fn open(env: &str, agent: &AgentPeer, port: u16) -> Result<Open, EnvError> {
    let lost = |e: std::io::Error| {
        EnvError::Refused(format!(
            "env {env:?}: the desktop's agent did not answer a tunnel ({e}); call Reset to restart it"
        ))
    };
    let stream = UnixStream::connect(&agent.socket).await.map_err(lost)?;
    // Only this env's own agent may answer (see `AgentPeer`).
    agent
        .verify(std::os::fd::AsFd::as_fd(&stream))
        .map_err(EnvError::from)?;
    let (read, mut writer) = stream.into_split();
    let mut line = serde_json::to_vec(&Request::Connect { port })
        .map_err(|_| EnvError::Bug("a Connect request does not serialize"))?;
    line.push(b'\n');
    writer.write_all(&line).await.map_err(lost)?;
    let mut reader = BufReader::new(read);
    let mut answer = Vec::new();
    let mut limited = (&mut reader).take(MAX_REPLY_LINE as u64);
    match tokio::time::timeout(ANSWER_TIMEOUT, limited.read_until(b'\n', &mut answer)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(lost(e)),
        Err(_) => {
            return Err(EnvError::Refused(format!(
                "env {env:?}: port {port} did not accept within {ANSWER_TIMEOUT:?}"
            )));
        }
    }
    // The agent runs as the sandbox's user: its answer is parsed, never trusted further.
    match serde_json::from_slice::<Reply>(&answer) {
        Ok(Reply::Connected) => Ok(Open { reader, writer }),
        Ok(Reply::Failed { message }) => Err(EnvError::Refused(format!("env {env:?}: {message}"))),
        Ok(Reply::Busy { message }) => Err(EnvError::Limit(format!("env {env:?}: {message}"))),
        Ok(other) => Err(EnvError::Refused(format!(
            "env {env:?}: the desktop's agent answered a tunnel with {}",
            other.kind()
        ))),
        Err(_) => Err(EnvError::Refused(format!(
            "env {env:?}: the desktop's agent closed the tunnel to port {port} without an answer"
        ))),
    }
}

/// The response stream of a tunnel.
pub(crate) type Outbound = tokio_stream::wrappers::ReceiverStream<Result<pb::TunnelData, Status>>;

/// Carries bytes both ways: `first` (data of the request's first message) and then the
/// client's messages into the port, the port's bytes out as the returned stream, which
/// starts with one empty message (the port accepted). The port closing, the client
/// going away or the server shutting down (`closing`) ends both directions.
pub(crate) fn relay(
    open: Open,
    first: Bytes,
    mut inbound: tonic::Streaming<pb::TunnelData>,
    mut closing: tokio::sync::watch::Receiver<bool>,
) -> Outbound {
    let Open {
        mut reader,
        mut writer,
    } = open;
    let to_port = tokio::spawn(async move {
        if !first.is_empty() && writer.write_all(&first).await.is_err() {
            return;
        }
        // A client error or end of stream closes the port's write side; the port then
        // closes its side, which ends the outbound stream.
        while let Ok(Some(m)) = inbound.message().await {
            if writer.write_all(&m.data).await.is_err() {
                break;
            }
        }
        let _ = writer.shutdown().await;
    });
    let (tx, rx) = tokio::sync::mpsc::channel(QUEUE);
    tokio::spawn(async move {
        let out = tx.clone();
        let carried = async move {
            if out.send(Ok(pb::TunnelData::default())).await.is_err() {
                return;
            }
            loop {
                let mut buf = BytesMut::with_capacity(CHUNK);
                let m = match reader.read_buf(&mut buf).await {
                    Ok(0) => return,
                    Ok(_) => Ok(pb::TunnelData {
                        data: buf.freeze(),
                        ..Default::default()
                    }),
                    Err(e) => Err(Status::unavailable(format!("the tunnel broke: {e}"))),
                };
                let broke = m.is_err();
                // The client went away: dropping `reader` closes the connection.
                if out.send(m).await.is_err() || broke {
                    return;
                }
            }
        };
        tokio::select! {
            () = carried => {}
            () = async { drop(closing.wait_for(|c| *c).await) } => {
                let _ = tx.send(Err(Status::unavailable("the server is shutting down"))).await;
            }
        }
        // Nothing comes back any more: stop reading the client too, so its call ends.
        to_port.abort();
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}
