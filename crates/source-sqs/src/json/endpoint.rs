//! Where the JSON client sends its calls, resolved once as the SDK resolves it: the SDK's own
//! endpoint rules for SQS (region, FIPS, dual-stack) with the endpoint override the
//! configuration chain gives (`endpoint-url` in qhost.toml, `AWS_ENDPOINT_URL_SQS`,
//! `AWS_ENDPOINT_URL`, or a profile's `endpoint_url`), so both clients always reach the same
//! server.

use aws_sdk_sqs::config::endpoint::{DefaultResolver, Params, ResolveEndpoint as _};
use futures_util::FutureExt as _;

/// The SQS endpoint for `sdk`, or why there is none.
pub(crate) fn resolve(sdk: &aws_config::SdkConfig) -> Result<http::Uri, String> {
    let params = Params::builder()
        .set_region(sdk.region().map(ToString::to_string))
        .set_use_fips(sdk.use_fips())
        .set_use_dual_stack(sdk.use_dual_stack())
        .set_endpoint(endpoint_url(sdk))
        .build()
        .map_err(|e| format!("the SQS endpoint's parameters: {e}"))?;
    let resolver = DefaultResolver::new();
    // The default rules are plain computation: the future is ready when made.
    let resolved = (resolver.resolve_endpoint(&params).now_or_never())
        .ok_or("the SQS endpoint resolver did not answer at once")?
        .map_err(|e| match sdk.region() {
            None => "no AWS region: set `region` under [source] in qhost.toml, or AWS_REGION"
                .to_string(),
            Some(_) => format!("no SQS endpoint: {e}"),
        })?;
    (resolved.url().parse()).map_err(|e| format!("the SQS endpoint `{}`: {e}", resolved.url()))
}

/// The endpoint override, chosen as the SDK's SQS client chooses it: one set in code first,
/// then the service's own (`AWS_ENDPOINT_URL_SQS`, a profile's `sqs` section), then the
/// general one.
fn endpoint_url(sdk: &aws_config::SdkConfig) -> Option<String> {
    let general = sdk.endpoint_url().map(str::to_string);
    if sdk.get_origin("endpoint_url").is_client_config() {
        return general;
    }
    let key = aws_types::service_config::ServiceConfigKey::builder()
        .service_id("SQS")
        .env("AWS_ENDPOINT_URL")
        .profile("endpoint_url")
        .build()
        .ok()?;
    (sdk.service_config())
        .and_then(|config| config.load_config(key))
        .or(general)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sdk(region: Option<&str>, endpoint: Option<&str>) -> aws_config::SdkConfig {
        let mut b = aws_config::SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest());
        b.set_region(region.map(|r| aws_config::Region::new(r.to_string())));
        b.set_endpoint_url(endpoint.map(str::to_string));
        b.build()
    }

    #[test]
    fn the_regional_endpoint_unless_overridden() {
        let uri = resolve(&sdk(Some("eu-west-1"), None)).unwrap();
        assert_eq!(uri.to_string(), "https://sqs.eu-west-1.amazonaws.com/");
        let local = resolve(&sdk(Some("us-east-1"), Some("http://127.0.0.1:4566"))).unwrap();
        assert_eq!(local.to_string(), "http://127.0.0.1:4566/");
    }

    #[test]
    fn no_region_says_what_to_set() {
        let e = resolve(&sdk(None, None)).unwrap_err();
        assert!(e.contains("no AWS region"), "{e}");
    }
}
