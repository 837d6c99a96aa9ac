//! Bearer-token authentication as a tonic interceptor.

use std::sync::Arc;

use tonic::{Request, Status};

use crate::error::ServiceError;

/// Checks `authorization: Bearer <token>` on every request when a token is configured.
#[derive(Clone, Debug, Default)]
pub struct Auth {
    token: Option<Arc<[u8]>>,
}

impl Auth {
    /// An interceptor that requires `token`, or lets everything through for `None`.
    pub fn new(token: Option<&str>) -> Self {
        Self {
            token: token.map(|t| Arc::from(t.as_bytes())),
        }
    }

    /// The interceptor body: pass or UNAUTHENTICATED. Never logs the token.
    pub fn check(&self, req: Request<()>) -> Result<Request<()>, Status> {
        let Some(want) = &self.token else {
            return Ok(req);
        };
        let got = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| {
                ServiceError::Unauthenticated(
                    "missing `authorization: Bearer <token>` metadata".into(),
                )
            })?;
        if constant_time_eq(got.as_bytes(), want) {
            Ok(req)
        } else {
            Err(ServiceError::Unauthenticated("wrong bearer token".into()).into())
        }
    }
}

/// Compares without an early exit, so timing does not reveal how much of a guess matched.
/// (The length is not secret: tokens have a fixed length.)
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(header: Option<&str>) -> Request<()> {
        let mut r = Request::new(());
        if let Some(h) = header {
            r.metadata_mut().insert("authorization", h.parse().unwrap());
        }
        r
    }

    #[test]
    fn token_is_checked() {
        let a = Auth::new(Some("s3cret"));
        assert!(a.check(req(Some("Bearer s3cret"))).is_ok());
        assert_eq!(
            a.check(req(Some("Bearer s3creT"))).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(
            a.check(req(Some("s3cret"))).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert_eq!(
            a.check(req(None)).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        assert!(Auth::new(None).check(req(None)).is_ok());
    }

    #[test]
    fn constant_time_eq_is_eq() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }
}
