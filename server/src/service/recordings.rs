//! Recordings: ListRecordings, GetRecordingFile and DeleteRecording.

use super::*;

impl DeskgymService {
    pub(super) async fn do_list_recordings(
        &self,
        req: Request<pb::ListRecordingsRequest>,
    ) -> Result<Response<pb::ListRecordingsResponse>, Status> {
        let who = principal(&req)?;
        let mgr = self.mgr.clone();
        let runs = PoolManager::join(self.mgr.spawn(move || Ok(mgr.recordings(&who)))).await?;
        Ok(Response::new(pb::ListRecordingsResponse {
            recordings: runs
                .into_iter()
                .map(|r| pb::Recording {
                    run: r.run,
                    status: r.status,
                    files: r
                        .files
                        .into_iter()
                        .map(|(path, size)| pb::RecordingFile { path, size })
                        .collect(),
                })
                .collect(),
        }))
    }

    pub(super) async fn do_get_recording_file(
        &self,
        req: Request<pb::GetRecordingFileRequest>,
    ) -> Result<Response<<Self as Deskgym>::GetRecordingFileStream>, Status> {
        let who = principal(&req)?;
        let r = req.into_inner();
        let offset = r.offset;
        let mgr = self.mgr.clone();
        let (size, data, eof) = PoolManager::join(
            self.mgr
                .spawn(move || mgr.recording_file(&who, &r.run, &r.path, offset)),
        )
        .await?;
        Ok(Response::new(file_chunks(offset, size, data, eof)))
    }

    pub(super) async fn do_delete_recording(
        &self,
        req: Request<pb::DeleteRecordingRequest>,
    ) -> Result<Response<pb::DeleteRecordingResponse>, Status> {
        let who = principal(&req)?;
        let run = req.into_inner().run;
        let mgr = self.mgr.clone();
        PoolManager::join(self.mgr.spawn(move || mgr.delete_recording(&who, &run))).await?;
        Ok(Response::new(pb::DeleteRecordingResponse {}))
    }
}
