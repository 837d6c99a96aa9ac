//! Screencast: the RPC over [`crate::watch`] (validation here, the streams there).

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
        let fps = if r.fps == 0.0 { 5.0 } else { r.fps };
        if !(0.1..=30.0).contains(&fps) {
            return Err(
                Invalid::new("fps", format!("{} is outside 0.1..=30 (0: 5)", r.fps)).into(),
            );
        }
        let shape = convert::shape("", r.scope, r.window, r.max_long_edge, r.jpeg_quality)?;
        let h264 = match pb::ScreencastCodec::try_from(r.codec) {
            Ok(pb::ScreencastCodec::H264) => true,
            Ok(_) => false,
            Err(_) => {
                return Err(Invalid::new(
                    "codec",
                    format!("{} is not a ScreencastCodec (JPEG 1, H264 2)", r.codec),
                )
                .into());
            }
        };
        let rx = self.screencasts.open(env, shape, fps, h264)?;
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            rx,
        )))
    }
}
