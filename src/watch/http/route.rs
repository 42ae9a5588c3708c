//! What `/metrics` answers: the request's method, path and Accept header
//! pick the status and the text format.

use super::super::metrics::Metrics;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{ACCEPT, ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

/// OpenMetrics text, for clients that ask for it (Prometheus does).
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The classic Prometheus text format, for everyone else (curl, promtool).
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The answer to one request (hyper leaves the body out for HEAD).
pub fn answer<B>(req: &Request<B>, metrics: &Metrics) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n".into(), "text/plain");
        r.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    if req.uri().path() != "/metrics" {
        return text(StatusCode::NOT_FOUND, "not found; metrics are at /metrics\n".into(), "text/plain");
    }
    let openmetrics = req
        .headers()
        .get_all(ACCEPT)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.contains("application/openmetrics-text")));
    if openmetrics {
        text(StatusCode::OK, metrics.encode(), OPENMETRICS)
    } else {
        text(StatusCode::OK, prometheus_text(&metrics.encode()), PROMETHEUS_TEXT)
    }
}

fn text(status: StatusCode, body: String, ctype: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(ctype));
    r
}

/// OpenMetrics text rewritten in the classic Prometheus text format (0.0.4):
/// a counter's family is named with its `_total` suffix, and the `# UNIT`
/// and `# EOF` lines, which that format does not have, are left out.
pub fn prometheus_text(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let mut help: Option<&str> = None;
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if line.starts_with("# HELP ") {
            // Written once the TYPE line says whether the name needs `_total`.
            help = Some(line);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap_or((rest, ""));
            let full = if ty == "counter" { format!("{name}_total") } else { name.to_string() };
            let ty = if ty == "unknown" { "untyped" } else { ty };
            if let Some(h) = help.take() {
                let text = h.strip_prefix("# HELP ").and_then(|r| r.split_once(' ')).map_or("", |(_, t)| t);
                out.push_str(&format!("# HELP {full} {text}\n"));
            }
            out.push_str(&format!("# TYPE {full} {ty}\n"));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}
