//! Blob Batch: many Delete Blob in one request. A prune of millions of blobs would otherwise
//! cost one round trip per blob; a batch carries up to 256 of them, so a deletion pass goes
//! about as fast as the listing that planned it.
//!
//! The batch is a `multipart/mixed` POST to the container whose parts are whole HTTP
//! requests, each authorized exactly as it would be alone (the service checks every part on
//! its own), and whose answer holds one HTTP response per part. The outer request travels the
//! shared pipeline, so it is signed, retried and counted (`batches`) like any other.

use std::time::Instant;

use azure_core::error::CheckSuccessOptions;
use azure_core::http::headers::HeaderName;
use azure_core::http::{Context, Method, PipelineSendOptions, Request, Url};
use bytes::Bytes;

use super::auth::{self, Credential};
use super::{map_err, AzureStore, Inner};
use crate::error::{Result, StoreError};
use crate::retry::retry;
use crate::storage::Store;

/// The service's limit of parts per batch.
pub const MAX: usize = 256;

/// `Store::delete_many` of a Blob store: batches of up to `MAX`, one after another. One path
/// alone goes as a plain Delete Blob, which costs the same one request and less to build.
pub(super) async fn delete_paths(store: &AzureStore, paths: &[Vec<u8>]) -> Vec<Result<()>> {
    if let [path] = paths {
        return vec![store.delete(path).await];
    }
    let s = &*store.inner;
    let mut out: Vec<Option<Result<()>>> = Vec::with_capacity(paths.len());
    let mut named = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        match s.name(p) {
            Ok(n) => {
                named.push((i, n));
                out.push(None);
            }
            Err(e) => out.push(Some(Err(e))),
        }
    }
    for chunk in named.chunks(MAX) {
        let names: Vec<String> = chunk.iter().map(|(_, n)| n.clone()).collect();
        for ((i, _), r) in chunk.iter().zip(delete_batch(s, &names).await) {
            out[*i] = Some(r);
        }
    }
    out.into_iter()
        .map(|r| r.expect("every path has its result"))
        .collect()
}

/// The first failure among a batch's results.
pub(super) fn first_err(results: Vec<Result<()>>) -> Option<StoreError> {
    results.into_iter().find_map(Result::err)
}

/// One batch, whose parts the service refused for a passing reason (503 ServerBusy and the
/// like inside the batch) sent again as a smaller batch, under the same retry policy as any
/// request: a batch is one request, so it counts one retry.
async fn delete_batch(s: &Inner, names: &[String]) -> Vec<Result<()>> {
    let started = Instant::now();
    let mut out: Vec<Option<Result<()>>> = names.iter().map(|_| None).collect();
    let mut pending: Vec<usize> = (0..names.len()).collect();
    let mut round = 0;
    while !pending.is_empty() {
        let batch: Vec<&str> = pending.iter().map(|&i| names[i].as_str()).collect();
        let answers = match send(s, &batch).await {
            Ok(a) => a,
            Err(e) => {
                for &i in &pending {
                    out[i] = Some(Err(same(&e)));
                }
                break;
            }
        };
        let mut again = Vec::new();
        let mut wait: Option<(String, Option<std::time::Duration>)> = None;
        let may_retry = round < s.retry.max_retries && started.elapsed() < s.retry.budget;
        for (&i, r) in pending.iter().zip(answers) {
            match r {
                Err(e) if may_retry && e.retry_label().is_some() => {
                    wait.get_or_insert((e.retry_label().unwrap_or_default(), e.retry_after()));
                    again.push(i);
                }
                r => out[i] = Some(r),
            }
        }
        if let Some((label, after)) = wait {
            s.stats.retried(&label);
            tokio::time::sleep(s.retry.backoff(round, after)).await;
            round += 1;
        }
        pending = again;
    }
    out.into_iter()
        .map(|r| {
            r.unwrap_or_else(|| Err(StoreError::Invalid("no answer for it in the batch".into())))
        })
        .collect()
}

/// Sends one batch of deletions; the answer for each name, in order. The whole batch is
/// retried when the outer request fails for a passing reason: a blob deleted by the first
/// attempt answers 404 to the second, which counts as deleted.
async fn send(s: &Inner, names: &[&str]) -> Result<Vec<Result<()>>> {
    let clients = s.clients().await?;
    let mut url = clients.base.clone();
    url.query_pairs_mut()
        .append_pair("restype", "container")
        .append_pair("comp", "batch");
    let (headers, body) = retry(&s.retry, &s.stats, || async {
        // Built afresh for each attempt: every part carries its own date and signature.
        let boundary = format!("batch_{:032x}", fastrand::u128(..));
        let mut parts = Vec::with_capacity(names.len());
        for name in names {
            parts.push(part(s, name).await?);
        }
        let mut req = Request::new(url.clone(), Method::Post);
        req.insert_header("x-ms-version", clients.options.version.clone());
        req.insert_header(
            "content-type",
            format!("multipart/mixed; boundary={boundary}"),
        );
        req.set_body(Bytes::from(body(&boundary, &parts)));
        let opts = PipelineSendOptions {
            check_success: CheckSuccessOptions {
                success_codes: &[202],
            },
            ..Default::default()
        };
        let resp = clients
            .pipeline
            .send(&Context::new(), &mut req, Some(opts))
            .await
            .map_err(map_err)?;
        let (_, headers, body) = resp.deconstruct();
        Ok((headers, Bytes::copy_from_slice(&body)))
    })
    .await?;
    let content_type = headers
        .get_optional_str(&HeaderName::from_static("content-type"))
        .unwrap_or_default();
    let answers = parse(content_type, &body)?;
    Ok(outcomes(names.len(), answers))
}

/// One Delete Blob as it would be sent alone, for a part of a batch.
async fn part(s: &Inner, name: &str) -> Result<Request> {
    let mut req = Request::new(s.blob_url(name).await?, Method::Delete);
    req.insert_header(
        "x-ms-date",
        httpdate::fmt_http_date(std::time::SystemTime::now()),
    );
    req.insert_header("x-ms-delete-snapshots", "include");
    req.insert_header("content-length", "0");
    match &s.cred {
        Credential::SharedKey { account, key } => {
            let sig = auth::shared_key_signature(account, key, &req);
            req.insert_header("authorization", sig);
        }
        Credential::Token(_) => {
            // The token source the outer request is signed with; it caches its token.
            if let Some(cred) = &s.clients().await?.token {
                let token = cred
                    .get_token(&[auth::STORAGE_SCOPE], None)
                    .await
                    .map_err(map_err)?;
                req.insert_header("authorization", format!("Bearer {}", token.token.secret()));
            }
        }
        // A SAS is in the blob's URL already, and so in the part's request line.
        Credential::Sas(_) | Credential::Anonymous => {}
    }
    Ok(req)
}

/// The multipart body: one part per request, each a request line, its headers and no body.
fn body(boundary: &str, parts: &[Request]) -> Vec<u8> {
    let mut b = String::with_capacity(parts.len() * 512);
    for (id, req) in parts.iter().enumerate() {
        b.push_str(&format!("--{boundary}\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\nContent-ID: {id}\r\n\r\n"));
        b.push_str(&format!(
            "{} {} HTTP/1.1\r\n",
            req.method().as_ref().to_ascii_uppercase(),
            target(req.url())
        ));
        for (k, v) in req.headers().iter() {
            b.push_str(&format!("{}: {}\r\n", k.as_str(), v.as_str()));
        }
        b.push_str("\r\n");
    }
    b.push_str(&format!("--{boundary}--\r\n"));
    b.into_bytes()
}

/// The request target of a part: the path and query of its URL, as a request line has them.
fn target(url: &Url) -> String {
    match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    }
}

/// One HTTP response inside a batch's answer.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    /// The Content-ID of the part it answers; none when the service answers for the whole batch.
    id: Option<usize>,
    status: u16,
    code: Option<String>,
    message: Option<String>,
}

/// The parts of a `multipart/mixed` batch answer.
fn parse(content_type: &str, body: &[u8]) -> Result<Vec<Answer>> {
    let bad = |why: &str| StoreError::Invalid(format!("unreadable batch answer: {why}"));
    let boundary = content_type
        .split(';')
        .filter_map(|p| p.trim().strip_prefix("boundary="))
        .map(|b| b.trim_matches('"'))
        .next()
        .ok_or_else(|| bad("no boundary in its Content-Type"))?;
    let text = String::from_utf8_lossy(body);
    let delimiter = format!("--{boundary}");
    let mut answers = Vec::new();
    // What precedes the first delimiter is a preamble; what follows the closing one ("--"), an epilogue.
    for section in text.split(delimiter.as_str()).skip(1) {
        if section.starts_with("--") {
            break;
        }
        let (mime, http) = split_head(section.trim_start_matches(['\r', '\n']))
            .ok_or_else(|| bad("a part without headers"))?;
        let id = header(mime, "content-id").and_then(|v| v.parse().ok());
        let (head, payload) = split_head(http).unwrap_or((http, ""));
        let mut lines = head.lines();
        let status = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("a part without a status line"))?;
        let (xml_code, message) = super::xml::parse_error(payload.trim().as_bytes());
        let code = header(head, "x-ms-error-code")
            .map(str::to_string)
            .or(xml_code);
        answers.push(Answer {
            id,
            status,
            code,
            message,
        });
    }
    Ok(answers)
}

/// Splits a message at its first empty line: the headers, and what follows.
fn split_head(s: &str) -> Option<(&str, &str)> {
    s.split_once("\r\n\r\n").or_else(|| s.split_once("\n\n"))
}

/// The value of header `name` among `head`'s lines.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// What each of `n` parts came to. A part the answer does not mention failed with the answer
/// for the whole batch, if there is one (a batch the service could not read), else as unanswered.
fn outcomes(n: usize, answers: Vec<Answer>) -> Vec<Result<()>> {
    let mut out: Vec<Option<Result<()>>> = (0..n).map(|_| None).collect();
    let mut whole = None;
    for a in answers {
        match a.id {
            Some(i) if i < n => out[i] = Some(outcome(&a)),
            _ if a.status >= 300 => whole = Some(a),
            _ => {}
        }
    }
    out.into_iter()
        .map(|r| match (r, &whole) {
            (Some(r), _) => r,
            (None, Some(a)) => outcome(a),
            (None, None) => Err(StoreError::Invalid(
                "the batch's answer has nothing for it".into(),
            )),
        })
        .collect()
}

fn outcome(a: &Answer) -> Result<()> {
    match a.status {
        200..=299 => Ok(()),
        404 if a.code.as_deref() != Some("ContainerNotFound") => Ok(()),
        404 => Err(StoreError::RootNotFound(format!(
            "ContainerNotFound: {}",
            a.message
                .as_deref()
                .unwrap_or("the container does not exist")
        ))),
        status => {
            let mut message = a
                .message
                .clone()
                .unwrap_or_else(|| format!("status {status}"));
            if status == 403 {
                message
                    .push_str(" (check the credentials: `ferry env` shows which source is in use)");
            }
            Err(StoreError::Http {
                status,
                code: a.code.clone(),
                message,
                retry_after: None,
            })
        }
    }
}

/// The error of a batch that failed as a whole, once for each of its parts.
fn same(e: &StoreError) -> StoreError {
    match e {
        StoreError::Http {
            status,
            code,
            message,
            retry_after,
        } => StoreError::Http {
            status: *status,
            code: code.clone(),
            message: message.clone(),
            retry_after: *retry_after,
        },
        StoreError::Transport { cause, message } => StoreError::transport(*cause, message),
        StoreError::RootNotFound(m) => StoreError::RootNotFound(m.clone()),
        StoreError::Auth(m) => StoreError::Auth(m.clone()),
        StoreError::NotFound(m) => StoreError::NotFound(m.clone()),
        other => StoreError::Invalid(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delete(url: &str, headers: &[(&'static str, &str)]) -> Request {
        let mut r = Request::new(Url::parse(url).unwrap(), Method::Delete);
        for (k, v) in headers {
            r.insert_header(*k, v.to_string());
        }
        r
    }

    #[test]
    fn the_body_holds_each_request_whole_with_its_own_authorization() {
        let parts = [
            delete(
                "http://127.0.0.1:1/acct/ctr/a%20b.txt",
                &[
                    ("x-ms-date", "Mon, 01 Jan 2024 00:00:00 GMT"),
                    ("authorization", "SharedKey acct:c2ln"),
                ],
            ),
            delete(
                "http://127.0.0.1:1/acct/ctr/d/e?sv=2024-08-04&sig=abc",
                &[("content-length", "0")],
            ),
        ];
        let text = String::from_utf8(body("batch_x", &parts)).unwrap();
        let chunks: Vec<&str> = text.split("--batch_x").collect();
        assert_eq!(chunks.len(), 4, "{text}");
        assert_eq!(chunks[0], "");
        assert!(chunks[1].starts_with("\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\nContent-ID: 0\r\n\r\nDELETE /acct/ctr/a%20b.txt HTTP/1.1\r\n"), "{text}");
        assert!(
            chunks[1].contains("\r\nx-ms-date: Mon, 01 Jan 2024 00:00:00 GMT\r\n")
                && chunks[1].contains("\r\nauthorization: SharedKey acct:c2ln\r\n"),
            "{text}"
        );
        assert!(
            chunks[1].ends_with("\r\n\r\n"),
            "a part's request ends in an empty line: {text}"
        );
        // A SAS travels in the part's request line, as it would alone.
        assert!(chunks[2].contains("Content-ID: 1\r\n\r\nDELETE /acct/ctr/d/e?sv=2024-08-04&sig=abc HTTP/1.1\r\ncontent-length: 0\r\n\r\n"), "{text}");
        assert_eq!(chunks[3], "--\r\n");
    }

    #[test]
    fn a_part_is_signed_as_the_same_request_alone() {
        let key = b"0123456789abcdef";
        let alone = delete(
            "http://127.0.0.1:1/acct/ctr/x",
            &[
                ("x-ms-date", "Mon, 01 Jan 2024 00:00:00 GMT"),
                ("content-length", "0"),
            ],
        );
        let sig = auth::shared_key_signature("acct", key, &alone);
        let mut signed = alone.clone();
        signed.insert_header("authorization", sig.clone());
        let text = String::from_utf8(body("b", &[signed])).unwrap();
        assert!(
            text.contains(&format!("authorization: {sig}\r\n")),
            "{text}"
        );
    }

    const ANSWER: &str = "--batchresponse_66925647-d0cb-4109-b6d3-28efe3e1e5ed\r\n\
Content-Type: application/http\r\n\
Content-ID: 0\r\n\
\r\n\
HTTP/1.1 202 Accepted\r\n\
x-ms-delete-type-permanent: true\r\n\
x-ms-request-id: 778fdc83-801e-0000-62ff-0334671e284f\r\n\
x-ms-version: 2018-11-09\r\n\
\r\n\
--batchresponse_66925647-d0cb-4109-b6d3-28efe3e1e5ed\r\n\
Content-Type: application/http\r\n\
Content-ID: 2\r\n\
\r\n\
HTTP/1.1 412 There is currently a lease on the blob and no lease ID was specified in the request.\r\n\
x-ms-error-code: LeaseIdMissing\r\n\
Content-Type: application/xml\r\n\
\r\n\
<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<Error><Code>LeaseIdMissing</Code><Message>There is currently a lease on the blob and no lease ID was specified in the request.\nRequestId:1</Message></Error>\r\n\
--batchresponse_66925647-d0cb-4109-b6d3-28efe3e1e5ed\r\n\
Content-Type: application/http\r\n\
Content-ID: 1\r\n\
\r\n\
HTTP/1.1 404 The specified blob does not exist.\r\n\
x-ms-error-code: BlobNotFound\r\n\
\r\n\
--batchresponse_66925647-d0cb-4109-b6d3-28efe3e1e5ed\r\n\
Content-Type: application/http\r\n\
Content-ID: 3\r\n\
\r\n\
HTTP/1.1 503 Server Busy\r\n\
\r\n\
<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>ServerBusy</Code><Message>Busy.</Message></Error>\r\n\
--batchresponse_66925647-d0cb-4109-b6d3-28efe3e1e5ed--";

    const CT: &str = "multipart/mixed; boundary=batchresponse_66925647-d0cb-4109-b6d3-28efe3e1e5ed";

    #[test]
    fn the_answer_gives_each_part_its_status_and_error_code() {
        let answers = parse(CT, ANSWER.as_bytes()).unwrap();
        assert_eq!(answers.len(), 4);
        assert_eq!(
            (answers[0].id, answers[0].status, answers[0].code.as_deref()),
            (Some(0), 202, None)
        );
        assert_eq!(answers[1], Answer {
            id: Some(2),
            status: 412,
            code: Some("LeaseIdMissing".into()),
            message: Some("There is currently a lease on the blob and no lease ID was specified in the request.".into()),
        });
        assert_eq!(
            (answers[2].status, answers[2].code.as_deref()),
            (404, Some("BlobNotFound"))
        );
        // No x-ms-error-code header: the code comes from the XML body.
        assert_eq!(
            (
                answers[3].status,
                answers[3].code.as_deref(),
                answers[3].message.as_deref()
            ),
            (503, Some("ServerBusy"), Some("Busy."))
        );
    }

    #[test]
    fn outcomes_follow_the_content_ids_not_the_order() {
        let r = outcomes(5, parse(CT, ANSWER.as_bytes()).unwrap());
        assert!(r[0].is_ok(), "202: deleted");
        assert!(r[1].is_ok(), "404: already gone");
        match &r[2] {
            Err(StoreError::Http {
                status: 412,
                code: Some(c),
                ..
            }) if c == "LeaseIdMissing" => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(
            r[3].as_ref().unwrap_err().retry_label().as_deref(),
            Some("503"),
            "a busy part may be sent again"
        );
        assert!(
            matches!(&r[4], Err(StoreError::Invalid(_))),
            "a part the answer skips is not taken as deleted"
        );
    }

    #[test]
    fn an_answer_for_the_whole_batch_fails_every_part() {
        // What the service says when it cannot read the batch: one response, no Content-ID.
        let answer = "--b\r\nContent-Type: application/http\r\n\r\nHTTP/1.1 400 One of the request inputs is not valid.\r\nx-ms-error-code: InvalidInput\r\n\r\n--b--\r\n";
        let r = outcomes(
            2,
            parse("multipart/mixed; boundary=b", answer.as_bytes()).unwrap(),
        );
        for x in &r {
            assert!(
                matches!(x, Err(StoreError::Http { status: 400, code: Some(c), .. }) if c == "InvalidInput"),
                "{x:?}"
            );
        }
    }

    #[test]
    fn an_answer_without_a_boundary_is_an_error() {
        assert!(parse("application/xml", b"<Error/>").is_err());
        assert!(parse(CT, b"--batchresponse_66925647-d0cb-4109-b6d3-28efe3e1e5ed\r\nContent-ID: 0\r\n\r\nnot http\r\n").is_err());
    }
}
