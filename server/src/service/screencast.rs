//! Screencast: the RPC over [`crate::screen_streams`] (validation here, the streams there).

use super::*;

/// The response stream of `Screencast`.
pub(crate) type Frames =
    tokio_stream::wrappers::ReceiverStream<Result<pb::ScreencastFrame, Status>>;

impl DeskgymService {
    pub(super) async fn do_screencast(
        &self,
        req: Request<pb::ScreencastRequest>,
    ) -> Result<Response<Frames>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        // Watching is allowed while a person drives the env at the console.
        let env = self.mgr.env_of(&r.env_id, &who)?;
        let c = checked::screencast(&r)?;
        let rx = self
            .screencasts
            .open(env, who.max_screencasts, c.shape, c.fps, c.h264)?;
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            rx,
        )))
    }
}
