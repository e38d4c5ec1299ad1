//! Where qhost writes Celery's result records (`[celery]`). A Celery queue's routes and
//! serializers are its `format`, `tasks` and `accept-content` (see `format`).

use std::time::Duration;

use anyhow::bail;
pub(crate) use qhost_formats::CeleryResults;

use super::file::RawCelery;
use crate::redis_link::redacted;

/// The checked `[celery]` section: `None` without a result backend.
pub(super) fn results_of(raw: Option<RawCelery>) -> anyhow::Result<Option<CeleryResults>> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let Some(url) = raw.result_backend else {
        if raw.result_expires_secs.is_some() {
            bail!("celery.result-expires-secs needs celery.result-backend");
        }
        return Ok(None);
    };
    if !(url.starts_with("redis://") || url.starts_with("rediss://"))
        || redis::parse_redis_url(&url).is_none()
    {
        bail!(
            "celery.result-backend `{}` must be a redis:// or rediss:// URL (the Redis result \
             backend is the one qhost writes)",
            redacted(&url)
        );
    }
    let expires = raw.result_expires_secs.unwrap_or(86_400);
    if expires == 0 {
        bail!("celery.result-expires-secs must be positive");
    }
    Ok(Some(CeleryResults {
        url,
        expires: Duration::from_secs(expires),
    }))
}
