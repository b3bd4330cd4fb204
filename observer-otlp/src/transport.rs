//! The two OTLP transports: gRPC (tonic) and HTTP/protobuf (hyper), each request's outcome
//! classified as the OTLP specification says: delivered (perhaps partly rejected), to retry
//! (after the server's delay, if it gave one), or refused for good.

use std::{
    io::{Read, Write},
    time::Duration,
};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::{Client as HttpClient, connect::HttpConnector};
use opentelemetry_proto::tonic::collector::{
    logs::v1::ExportLogsServiceResponse,
    metrics::v1::{
        ExportMetricsServiceRequest, ExportMetricsServiceResponse,
        metrics_service_client::MetricsServiceClient,
    },
};
use prost::Message;
use tonic::{
    Code,
    codec::CompressionEncoding,
    metadata::{MetadataKey, MetadataMap, MetadataValue},
    transport::{Certificate, Channel, ClientTlsConfig, Endpoint},
};

use crate::{Config, OtlpError, Protocol};

/// What became of one request.
#[derive(Debug)]
pub enum Outcome {
    /// Accepted; `rejected` items of it refused by the receiver (partial success, with its
    /// message).
    Delivered { rejected: u64, why: Option<String> },
    /// Not accepted, worth trying again (after `after`, when the server said).
    Retry {
        after: Option<Duration>,
        why: String,
    },
    /// Refused for good.
    Refused { why: String },
}

type Https = hyper_rustls::HttpsConnector<HttpConnector>;

// One per exporter, made once: boxing the larger variant would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Client {
    Grpc {
        /// The logs service, through [`RawCodec`]: requests go as encoded.
        logs: tonic::client::Grpc<Channel>,
        metrics: MetricsServiceClient<Channel>,
        headers: MetadataMap,
    },
    Http {
        client: HttpClient<Https, Full<Bytes>>,
        base: String,
        headers: Vec<(String, String)>,
        gzip: bool,
    },
}

/// The checks [`Config::validate`](crate::Config::validate) makes.
pub fn validate(config: &Config) -> Result<(), OtlpError> {
    let bad = |what: String| OtlpError::Config {
        endpoint: config.endpoint.clone(),
        what,
    };
    let uri: hyper::Uri = config
        .endpoint
        .parse()
        .map_err(|e| bad(format!("not a URL: {e}")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(bad("give http://HOST:PORT or https://HOST:PORT".into()));
    }
    for (k, v) in &config.headers {
        hyper::header::HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| bad(format!("header {k}: not a valid name")))?;
        hyper::header::HeaderValue::from_str(v)
            .map_err(|_| bad(format!("header {k}: not a valid value")))?;
    }
    roots(config)?;
    Ok(())
}

/// The certificates trusted for https://: the system's, and the CA file's.
fn roots(config: &Config) -> Result<rustls::RootCertStore, OtlpError> {
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(pem) = &config.ca_pem {
        let bad = |what: String| OtlpError::Config {
            endpoint: config.endpoint.clone(),
            what: format!("the CA file: {what}"),
        };
        let mut any = false;
        for cert in CertificateDer::pem_slice_iter(pem) {
            roots
                .add(cert.map_err(|e| bad(e.to_string()))?)
                .map_err(|e| bad(e.to_string()))?;
            any = true;
        }
        if !any {
            return Err(bad("no PEM certificate in it".into()));
        }
    }
    Ok(roots)
}

impl Client {
    /// A client for `config` (no connection yet: the first request connects, and a receiver
    /// that is down is a request to retry).
    pub fn new(config: &Config) -> Result<Self, OtlpError> {
        validate(config)?;
        let bad = |what: String| OtlpError::Config {
            endpoint: config.endpoint.clone(),
            what,
        };
        match config.protocol {
            Protocol::Grpc => {
                let mut endpoint = Endpoint::from_shared(config.endpoint.clone())
                    .map_err(|e| bad(format!("not a URL: {e}")))?
                    .connect_timeout(config.timeout)
                    .timeout(config.timeout);
                if config.endpoint.starts_with("https://") {
                    let mut tls = ClientTlsConfig::new().with_native_roots();
                    if let Some(pem) = &config.ca_pem {
                        tls = tls.ca_certificate(Certificate::from_pem(pem));
                    }
                    endpoint = endpoint
                        .tls_config(tls)
                        .map_err(|e| bad(format!("TLS: {e}")))?;
                }
                let channel = endpoint.connect_lazy();
                let mut headers = MetadataMap::new();
                for (k, v) in &config.headers {
                    let key = MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
                        .map_err(|_| bad(format!("header {k}: not a valid name")))?;
                    let value = MetadataValue::try_from(v.as_str())
                        .map_err(|_| bad(format!("header {k}: not a valid value")))?;
                    headers.insert(key, value);
                }
                let (mut logs, mut metrics) = (
                    tonic::client::Grpc::new(channel.clone()),
                    MetricsServiceClient::new(channel),
                );
                // Both ways: a receiver may compress its answers even unasked.
                logs = logs.accept_compressed(CompressionEncoding::Gzip);
                metrics = metrics.accept_compressed(CompressionEncoding::Gzip);
                if config.gzip {
                    logs = logs.send_compressed(CompressionEncoding::Gzip);
                    metrics = metrics.send_compressed(CompressionEncoding::Gzip);
                }
                Ok(Self::Grpc {
                    logs,
                    metrics,
                    headers,
                })
            }
            Protocol::HttpProtobuf => {
                if !(config.endpoint.starts_with("http://")
                    || config.endpoint.starts_with("https://"))
                {
                    return Err(bad("not an http:// or https:// URL".into()));
                }
                let roots = roots(config)?;
                let tls = rustls::ClientConfig::builder()
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                let https = hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(tls)
                    .https_or_http()
                    .enable_http1()
                    .build();
                let client = HttpClient::builder(hyper_util::rt::TokioExecutor::new()).build(https);
                Ok(Self::Http {
                    client,
                    base: config.endpoint.trim_end_matches('/').to_string(),
                    headers: config.headers.clone(),
                    gzip: config.gzip,
                })
            }
        }
    }

    /// Sends an encoded ExportLogsServiceRequest, gzip'd already when `gzipped` (the exporter
    /// compresses what it queues: the buffer holds more records, a retry compresses nothing
    /// again).
    pub async fn logs(&mut self, req: &[u8], gzipped: bool, timeout: Duration) -> Outcome {
        match self {
            Self::Grpc { logs, headers, .. } => {
                // tonic compresses a message itself (its frame's flag and grpc-encoding say
                // so): it is handed the plain request.
                let plain;
                let req = if gzipped {
                    let mut out = Vec::with_capacity(req.len() * 8);
                    if let Err(e) = flate2::read::GzDecoder::new(req).read_to_end(&mut out) {
                        return Outcome::Refused {
                            why: format!("gunzip: {e}"),
                        };
                    }
                    plain = out;
                    &plain[..]
                } else {
                    req
                };
                if let Err(e) = logs.ready().await {
                    return Outcome::Retry {
                        after: None,
                        why: format!("gRPC: not ready: {e}"),
                    };
                }
                let mut r = tonic::Request::new(Bytes::copy_from_slice(req));
                *r.metadata_mut() = headers.clone();
                r.set_timeout(timeout);
                let path = hyper::http::uri::PathAndQuery::from_static(
                    "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
                );
                match logs.unary(r, path, RawCodec).await {
                    Ok(resp) => delivered(resp.into_inner().refusals()),
                    Err(status) => grpc_outcome(&status),
                }
            }
            Self::Http { .. } => {
                self.post("/v1/logs", req.to_vec(), gzipped, timeout, |b| {
                    ExportLogsServiceResponse::decode(b).map(Refusals::refusals)
                })
                .await
            }
        }
    }

    pub async fn metrics(
        &mut self,
        req: &ExportMetricsServiceRequest,
        timeout: Duration,
    ) -> Outcome {
        match self {
            Self::Grpc {
                metrics, headers, ..
            } => {
                let mut r = tonic::Request::new(req.clone());
                *r.metadata_mut() = headers.clone();
                r.set_timeout(timeout);
                match metrics.export(r).await {
                    Ok(resp) => delivered(resp.into_inner().refusals()),
                    Err(status) => grpc_outcome(&status),
                }
            }
            Self::Http { .. } => {
                let body = req.encode_to_vec();
                self.post("/v1/metrics", body, false, timeout, |b| {
                    ExportMetricsServiceResponse::decode(b).map(Refusals::refusals)
                })
                .await
            }
        }
    }

    async fn post(
        &mut self,
        path: &str,
        body: Vec<u8>,
        gzipped: bool,
        timeout: Duration,
        refusals: impl Fn(Bytes) -> Result<(u64, String), prost::DecodeError>,
    ) -> Outcome {
        let Self::Http {
            client,
            base,
            headers,
            gzip,
        } = self
        else {
            unreachable!("post is the HTTP transport's");
        };
        let body = if *gzip && !gzipped {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            match gz.write_all(&body).and_then(|()| gz.finish()) {
                Ok(b) => b,
                Err(e) => {
                    return Outcome::Refused {
                        why: format!("gzip: {e}"),
                    };
                }
            }
        } else {
            body
        };
        let mut req = hyper::Request::post(format!("{base}{path}"))
            .header("content-type", "application/x-protobuf");
        if *gzip || gzipped {
            req = req.header("content-encoding", "gzip");
        }
        for (k, v) in headers.iter() {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = match req.body(Full::new(Bytes::from(body))) {
            Ok(r) => r,
            Err(e) => return Outcome::Refused { why: e.to_string() },
        };
        let resp = match tokio::time::timeout(timeout, client.request(req)).await {
            Err(_) => {
                return Outcome::Retry {
                    after: None,
                    why: format!("no answer within {timeout:?}"),
                };
            }
            Ok(Err(e)) => {
                return Outcome::Retry {
                    after: None,
                    why: format!("cannot reach it: {e}"),
                };
            }
            Ok(Ok(resp)) => resp,
        };
        let status = resp.status();
        let after = resp
            .headers()
            .get(hyper::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = match tokio::time::timeout(timeout, resp.into_body().collect()).await {
            Ok(Ok(b)) => b.to_bytes(),
            _ => Bytes::new(),
        };
        match status.as_u16() {
            // An answer that does not decode refuses nothing.
            200..=299 => delivered(refusals(body).unwrap_or_default()),
            // OTLP/HTTP: these are retryable, after Retry-After when given.
            429 | 502 | 503 | 504 => Outcome::Retry {
                after,
                why: format!("HTTP {status}"),
            },
            _ => Outcome::Refused {
                why: format!("HTTP {status}"),
            },
        }
    }
}

/// What an answer says the receiver refused of a request (partial success): how many items, and
/// why.
trait Refusals {
    fn refusals(self) -> (u64, String);
}

impl Refusals for ExportLogsServiceResponse {
    fn refusals(self) -> (u64, String) {
        self.partial_success
            .map(|p| {
                (
                    u64::try_from(p.rejected_log_records).unwrap_or(0),
                    p.error_message,
                )
            })
            .unwrap_or_default()
    }
}

impl Refusals for ExportMetricsServiceResponse {
    fn refusals(self) -> (u64, String) {
        self.partial_success
            .map(|p| {
                (
                    u64::try_from(p.rejected_data_points).unwrap_or(0),
                    p.error_message,
                )
            })
            .unwrap_or_default()
    }
}

fn delivered((rejected, why): (u64, String)) -> Outcome {
    Outcome::Delivered {
        rejected,
        why: Some(why).filter(|w| !w.is_empty()),
    }
}

/// OTLP/gRPC: these codes are retryable; the rest are not (RESOURCE_EXHAUSTED is only with a
/// RetryInfo, which this client does not read: it is not retried). A status made here from a
/// transport error (a connection reset or closed mid-request: UNKNOWN or INTERNAL with the
/// error as its source) is the network's, not the server's answer: retried, as OTLP/HTTP
/// retries a failed connection.
fn grpc_outcome(status: &tonic::Status) -> Outcome {
    let why = format!("gRPC {:?}: {}", status.code(), status.message());
    let local = {
        let mut source = std::error::Error::source(status);
        let mut found = false;
        while let Some(e) = source {
            found |= e.is::<hyper::Error>()
                || e.is::<std::io::Error>()
                || e.is::<tonic::transport::Error>();
            source = e.source();
        }
        found
    };
    if local && matches!(status.code(), Code::Unknown | Code::Internal) {
        return Outcome::Retry { after: None, why };
    }
    match status.code() {
        Code::Cancelled
        | Code::DeadlineExceeded
        | Code::Aborted
        | Code::OutOfRange
        | Code::Unavailable
        | Code::DataLoss => Outcome::Retry { after: None, why },
        _ => Outcome::Refused { why },
    }
}

/// A gRPC codec that sends bytes as they are (an ExportLogsServiceRequest encoded already) and
/// decodes the answer with prost.
#[derive(Clone, Copy, Default)]
struct RawCodec;

struct RawEncoder;

struct AnswerDecoder;

impl tonic::codec::Codec for RawCodec {
    type Encode = Bytes;
    type Decode = ExportLogsServiceResponse;
    type Encoder = RawEncoder;
    type Decoder = AnswerDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        RawEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        AnswerDecoder
    }
}

impl tonic::codec::Encoder for RawEncoder {
    type Item = Bytes;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Bytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), Self::Error> {
        use prost::bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for AnswerDecoder {
    type Item = ExportLogsServiceResponse;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Self::Item>, Self::Error> {
        ExportLogsServiceResponse::decode(src)
            .map(Some)
            .map_err(|e| tonic::Status::internal(format!("the answer: {e}")))
    }
}
