//! Tunnel: a port on an env's own loopback, relayed over a stream.

use super::*;

impl DeskgymService {
    pub(super) async fn do_tunnel(
        &self,
        req: Request<tonic::Streaming<pb::TunnelData>>,
    ) -> Result<Response<<Self as Deskgym>::TunnelStream>, Status> {
        let who = principal(&req)?;
        let mut inbound = req.into_inner();
        let first = first_message(
            &mut inbound,
            "env_id",
            "the first names the env and the port",
        )
        .await?;
        let port = checked::port(first.port)?;
        let env = self
            .granted(&first.env_id, &who, Capability::Exec, "Tunnel")
            .await?;
        let at = env.clone();
        let socket = tokio::task::spawn_blocking(move || at.agent_socket())
            .await
            .map_err(|e| PoolError::Internal(format!("tunnel lookup: {e}")))?
            .map_err(PoolError::from)?;
        let open = crate::tunnel::open(&env.id, &socket, port)
            .await
            .map_err(PoolError::from)?;
        Ok(Response::new(crate::tunnel::relay(
            open,
            first.data,
            inbound,
            self.closing.clone(),
        )))
    }
}
