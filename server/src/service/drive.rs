//! Drive: the axstream line runner over one env.

use super::*;

impl DeskgymService {
    pub(super) async fn do_drive(
        &self,
        req: Request<tonic::Streaming<pb::DriveRequest>>,
    ) -> Result<Response<<Self as Deskgym>::DriveStream>, Status> {
        let who = principal(&req)?;
        let mut inbound = req.into_inner();
        let first = first_message(&mut inbound, "env_id", "the first names the env").await?;
        let observe = checked::drive(&first, self.mgr.limits())?;
        let driver = crate::axstream::Driver::new(self.calls.clone(), who, &first, observe)?;
        Ok(Response::new(driver.run(
            first,
            inbound,
            self.closing.clone(),
        )))
    }
}
