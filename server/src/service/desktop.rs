//! The desktop's own state: ListWindows, GetClipboard and SetClipboard.

use super::*;

impl DeskgymService {
    pub(super) async fn do_list_windows(
        &self,
        req: Request<pb::ListWindowsRequest>,
    ) -> Result<Response<pb::ListWindowsResponse>, Status> {
        let who = principal(&req)?;
        let env = self
            .granted(
                &req.into_inner().env_id,
                &who,
                Capability::Windows,
                "ListWindows",
            )
            .await?;
        let job = self
            .mgr
            .on_env(&env, Call::ListWindows, self.mgr.op_timeout(), |e, _| {
                e.windows().map(convert::windows_response)
            })?;
        Ok(Response::new(job.finish().await?))
    }

    pub(super) async fn do_get_clipboard(
        &self,
        req: Request<pb::GetClipboardRequest>,
    ) -> Result<Response<pb::Clipboard>, Status> {
        let who = principal(&req)?;
        let env = self
            .granted(
                &req.into_inner().env_id,
                &who,
                Capability::Clipboard,
                "GetClipboard",
            )
            .await?;
        let job = self
            .mgr
            .on_env(&env, Call::Clipboard, self.mgr.op_timeout(), |e, _| {
                e.clipboard(None)
            })?;
        Ok(Response::new(pb::Clipboard {
            text: job.finish().await?,
        }))
    }

    pub(super) async fn do_set_clipboard(
        &self,
        req: Request<pb::SetClipboardRequest>,
    ) -> Result<Response<pb::Clipboard>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        let env = self
            .granted(&r.env_id, &who, Capability::Clipboard, "SetClipboard")
            .await?;
        checked::clipboard_text(&r.text)?;
        let job = self
            .mgr
            .on_env(&env, Call::Clipboard, self.mgr.op_timeout(), move |e, _| {
                e.clipboard(Some(&r.text))
            })?;
        Ok(Response::new(pb::Clipboard {
            text: job.finish().await?,
        }))
    }
}
