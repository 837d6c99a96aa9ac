//! `Connect`: a port of the sandbox's own loopback relayed over the agent's socket (the
//! worker's tunnels), and `Listen`: a listener on that loopback handed to the worker.

use super::*;

/// How long a `Connect` waits for the port to accept.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Serves a `Connect`: the port's bytes both ways, each way on its own thread, each
/// closing its write side at the other's end of stream (so either end hanging up ends
/// both).
pub(super) fn connect(
    reader: BufReader<UnixStream>,
    mut conn: UnixStream,
    port: u16,
) -> std::io::Result<()> {
    let addr = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port));
    let tcp = match std::net::TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
        Ok(t) => t,
        Err(e) => {
            let message =
                format!("nothing accepts connections on port {port} in this desktop ({e})");
            return reply_line(&mut conn, &Reply::Failed { message });
        }
    };
    tcp.set_nodelay(true)?;
    reply_line(&mut conn, &Reply::Connected)?;
    let (mut tcp_in, mut tcp_out) = (tcp.try_clone()?, tcp);
    let mut conn_out = conn;
    let spawned = helper(move || {
        let _ = std::io::copy(&mut tcp_in, &mut conn_out);
        let _ = conn_out.shutdown(std::net::Shutdown::Write);
    });
    if let Err(message) = spawned {
        // The reply went out already: closing is the only answer left.
        eprintln!("connect to port {port}: {message}");
        return Ok(());
    }
    // Bytes the worker sent right behind its request line sit in the reader's buffer.
    let mut reader = reader;
    let _ = std::io::copy(&mut reader, &mut tcp_out);
    let _ = tcp_out.shutdown(std::net::Shutdown::Write);
    Ok(())
}

/// Serves a `Listen`: a listener on a free port of the sandbox's loopback, passed to the
/// worker with the `Listening` reply (the agent keeps no copy: the server owns it, and
/// its end closes the port).
pub(super) fn listen(conn: &mut UnixStream) -> std::io::Result<()> {
    let listener = match std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)) {
        Ok(l) => l,
        Err(e) => {
            let message = format!("cannot listen on this desktop's loopback ({e})");
            return reply_line(conn, &Reply::Failed { message });
        }
    };
    let port = listener.local_addr()?.port();
    let mut line = serde_json::to_vec(&Reply::Listening { port })?;
    line.push(b'\n');
    crate::fdpass::send(conn, &line, std::os::fd::AsFd::as_fd(&listener))
}
