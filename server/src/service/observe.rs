//! Looking without acting: Observe and Screenshot.

use super::*;

impl DeskgymService {
    pub(super) async fn do_observe(
        &self,
        req: Request<pb::ObserveRequest>,
    ) -> Result<Response<pb::Observation>, Status> {
        let who = principal(&req)?;
        let req = req.into_inner();
        let env = self.mgr.env(&req.env_id, &who)?;
        let on = On {
            env: &env,
            limits: self.mgr.limits(),
            rings: self.calls.rings(),
            shared: &[],
        };
        let checked::Looking { opts, ring } = checked::observe(&req, &on)?;
        let job = self.mgr.on_env(
            &env,
            Call::Observe,
            self.mgr.op_timeout(),
            move |e, cache| {
                let mut o = convert::observation(e.observe(cache, &opts)?);
                if let Some(ring) = &ring {
                    ring.deliver(&mut o);
                }
                Ok(o)
            },
        )?;
        Ok(Response::new(job.finish().await?))
    }

    pub(super) async fn do_screenshot(
        &self,
        req: Request<pb::ScreenshotRequest>,
    ) -> Result<Response<pb::Observation>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        let env = self.mgr.env(&r.env_id, &who)?;
        let (shape, known) = checked::screenshot(&r, self.mgr.limits())?;
        let job = self.mgr.on_env(
            &env,
            Call::Screenshot,
            self.mgr.op_timeout(),
            move |e, _| {
                e.screenshot(shape, r.encoding, &known)
                    .map(convert::observation)
            },
        )?;
        Ok(Response::new(job.finish().await?))
    }
}
