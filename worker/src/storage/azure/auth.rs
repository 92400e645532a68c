//! Credential chain: SAS in the URL → shared key → SAS from the environment → workload
//! identity → managed identity → Azure CLI → anonymous. The first source whose inputs are
//! present wins; `--auth` forces one. Secrets are held here and never formatted anywhere.

use std::sync::Arc;
use std::time::Duration;

use azure_core::credentials::TokenCredential;
use azure_core::http::policies::{Policy, PolicyResult};
use azure_core::http::{
    AsyncRawResponse, ClientOptions, Context, HttpClient, Request, Transport, Url,
};
use azure_identity::{
    AzureCliCredential, ClientAssertionCredentialOptions, ManagedIdentityCredential,
    ManagedIdentityCredentialOptions, UserAssignedId, WorkloadIdentityCredential,
    WorkloadIdentityCredentialOptions,
};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::{Result, StoreError};

pub const STORAGE_SCOPE: &str = "https://storage.azure.com/.default";
const IMDS_HOST: &str = "169.254.169.254";
const DEFAULT_IMDS: &str = "http://169.254.169.254";

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthMode {
    Auto,
    SasUrl,
    Key,
    Sas,
    Workload,
    Managed,
    Cli,
    Anonymous,
}

impl AuthMode {
    pub fn name(self) -> &'static str {
        match self {
            AuthMode::Auto => "auto",
            AuthMode::SasUrl => "sas-url",
            AuthMode::Key => "key",
            AuthMode::Sas => "sas",
            AuthMode::Workload => "workload",
            AuthMode::Managed => "managed",
            AuthMode::Cli => "cli",
            AuthMode::Anonymous => "anonymous",
        }
    }
}

pub enum Credential {
    Anonymous,
    /// Query string added to every URL.
    Sas(String),
    SharedKey {
        account: String,
        key: Vec<u8>,
    },
    /// Entra ID tokens through azure_identity, from the first source in the chain that answers.
    Token(TokenChain),
}

/// Token sources tried in order on first use; in auto mode the chain ends in anonymous access,
/// so a public container still works on a machine with no identity.
pub struct TokenChain {
    kinds: Vec<TokenKind>,
    anonymous_last: bool,
}

enum TokenKind {
    Workload,
    Managed {
        endpoint: String,
        client_id: Option<String>,
    },
    Cli,
}

/// What `ferry env` reports: the chosen source and the non-secret inputs behind it.
pub struct Choice {
    pub mode: AuthMode,
    pub detail: String,
}

fn present(env: &dyn Fn(&str) -> Option<String>, k: &str) -> Option<String> {
    env(k).filter(|v| !v.is_empty())
}

/// Decides which source applies, without touching the network.
pub fn choose(
    forced: AuthMode,
    url_sas: bool,
    account: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Choice> {
    let key_ok = present(env, "AZURE_STORAGE_KEY").is_some();
    let workload_ok = [
        "AZURE_FEDERATED_TOKEN_FILE",
        "AZURE_CLIENT_ID",
        "AZURE_TENANT_ID",
    ]
    .iter()
    .all(|k| present(env, k).is_some());
    let mode = match forced {
        AuthMode::Auto => {
            if url_sas {
                AuthMode::SasUrl
            } else if key_ok {
                AuthMode::Key
            } else if present(env, "AZURE_STORAGE_SAS_TOKEN").is_some() {
                AuthMode::Sas
            } else if workload_ok {
                AuthMode::Workload
            } else {
                // Without local evidence we cannot know if IMDS exists; the token fetch decides,
                // falling back to the CLI and then anonymous access.
                AuthMode::Managed
            }
        }
        m => m,
    };
    let need = |ok: bool, what: &str| -> Result<()> {
        if ok {
            Ok(())
        } else {
            Err(StoreError::Auth(format!(
                "--auth {} needs {what}",
                mode.name()
            )))
        }
    };
    let detail = match mode {
        AuthMode::SasUrl => {
            need(url_sas, "a SAS token in the URL")?;
            "SAS token from the URL".to_string()
        }
        AuthMode::Key => {
            need(key_ok, "AZURE_STORAGE_KEY (and AZURE_STORAGE_ACCOUNT)")?;
            format!("shared key for account {account} (AZURE_STORAGE_KEY)")
        }
        AuthMode::Sas => {
            need(
                present(env, "AZURE_STORAGE_SAS_TOKEN").is_some(),
                "AZURE_STORAGE_SAS_TOKEN",
            )?;
            "SAS token from AZURE_STORAGE_SAS_TOKEN".to_string()
        }
        AuthMode::Workload => {
            need(
                workload_ok,
                "AZURE_FEDERATED_TOKEN_FILE, AZURE_CLIENT_ID and AZURE_TENANT_ID",
            )?;
            format!(
                "workload identity: client {} in tenant {}, token file {}",
                env("AZURE_CLIENT_ID").unwrap_or_default(),
                env("AZURE_TENANT_ID").unwrap_or_default(),
                env("AZURE_FEDERATED_TOKEN_FILE").unwrap_or_default()
            )
        }
        AuthMode::Managed => {
            let ep = present(env, "FERRY_IMDS_ENDPOINT").unwrap_or_else(|| DEFAULT_IMDS.into());
            let id = present(env, "AZURE_CLIENT_ID")
                .map(|c| format!(", client {c}"))
                .unwrap_or_default();
            if forced == AuthMode::Auto {
                format!("managed identity via {ep}{id} if it answers, else Azure CLI login, else anonymous")
            } else {
                format!("managed identity via {ep}{id}")
            }
        }
        AuthMode::Cli => "Azure CLI login (az account get-access-token)".to_string(),
        AuthMode::Anonymous => "anonymous (public containers only)".to_string(),
        AuthMode::Auto => unreachable!(),
    };
    Ok(Choice { mode, detail })
}

pub fn build(
    choice: &Choice,
    forced: AuthMode,
    account: &str,
    url_sas: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Credential> {
    let chain = |kinds, anonymous_last| {
        Ok(Credential::Token(TokenChain {
            kinds,
            anonymous_last,
        }))
    };
    match choice.mode {
        AuthMode::SasUrl => Ok(Credential::Sas(url_sas.unwrap_or_default().to_string())),
        AuthMode::Key => {
            let key = env("AZURE_STORAGE_KEY").unwrap_or_default();
            let key = base64::engine::general_purpose::STANDARD
                .decode(key.trim())
                .map_err(|_| StoreError::Auth("AZURE_STORAGE_KEY is not valid base64".into()))?;
            Ok(Credential::SharedKey {
                account: account.to_string(),
                key,
            })
        }
        AuthMode::Sas => Ok(Credential::Sas(
            env("AZURE_STORAGE_SAS_TOKEN")
                .unwrap_or_default()
                .trim_start_matches('?')
                .to_string(),
        )),
        AuthMode::Workload => chain(vec![TokenKind::Workload], false),
        AuthMode::Managed => {
            let managed = TokenKind::Managed {
                endpoint: present(env, "FERRY_IMDS_ENDPOINT")
                    .unwrap_or_else(|| DEFAULT_IMDS.into()),
                client_id: present(env, "AZURE_CLIENT_ID"),
            };
            if forced == AuthMode::Auto {
                chain(vec![managed, TokenKind::Cli], true)
            } else {
                chain(vec![managed], false)
            }
        }
        AuthMode::Cli => chain(vec![TokenKind::Cli], false),
        AuthMode::Anonymous => Ok(Credential::Anonymous),
        AuthMode::Auto => unreachable!(),
    }
}

/// The full chain of an azure_core error on one line: its top-level messages are generic.
pub fn error_text(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let next = s.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        src = s.source();
    }
    scrub_sas(&text)
}

/// SDK errors carry the request URL, SAS signature included: it must never reach a message.
pub fn scrub_sas(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("sig=") {
        out.push_str(&rest[..i + 4]);
        out.push_str("REDACTED");
        rest = &rest[i + 4..];
        let end = rest
            .find(|c: char| c == '&' || c == ')' || c == '"' || c == '\'' || c.is_whitespace())
            .unwrap_or(rest.len());
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

impl TokenChain {
    /// The first source that yields a token, or None when the chain ends in anonymous access.
    /// Decided once per store: probing IMDS on every request would cost seconds each.
    pub async fn resolve(
        &self,
        http: &Arc<dyn HttpClient>,
    ) -> Result<Option<Arc<dyn TokenCredential>>> {
        let mut errors = Vec::new();
        for kind in &self.kinds {
            match kind.credential(http).await {
                Ok(cred) => match cred.get_token(&[STORAGE_SCOPE], None).await {
                    Ok(_) => return Ok(Some(cred)),
                    Err(e) => errors.push(format!("{}: {}", kind.name(), error_text(&e))),
                },
                Err(e) => errors.push(e),
            }
        }
        if self.anonymous_last {
            return Ok(None);
        }
        Err(StoreError::Auth(errors.join("; ")))
    }
}

impl TokenKind {
    fn name(&self) -> &'static str {
        match self {
            TokenKind::Workload => "workload identity",
            TokenKind::Managed { .. } => "managed identity",
            TokenKind::Cli => "Azure CLI",
        }
    }

    async fn credential(
        &self,
        http: &Arc<dyn HttpClient>,
    ) -> std::result::Result<Arc<dyn TokenCredential>, String> {
        let fail = |e: azure_core::Error| format!("{}: {}", self.name(), error_text(&e));
        let client_options = || ClientOptions {
            transport: Some(Transport::new(http.clone())),
            ..Default::default()
        };
        match self {
            TokenKind::Workload => {
                // Tenant, client and token file come from the AZURE_* variables `choose` checked;
                // AZURE_AUTHORITY_HOST, if set, is read by azure_identity itself.
                let options = WorkloadIdentityCredentialOptions {
                    credential_options: ClientAssertionCredentialOptions {
                        client_options: client_options(),
                    },
                    ..Default::default()
                };
                Ok(WorkloadIdentityCredential::new(Some(options)).map_err(fail)?)
            }
            TokenKind::Managed {
                endpoint,
                client_id,
            } => {
                // azure_identity retries an unreachable IMDS for over a minute; off Azure it
                // never answers, so a one-second connect decides first.
                let url = Url::parse(endpoint)
                    .map_err(|e| format!("managed identity: bad endpoint {endpoint}: {e}"))?;
                let addr = format!(
                    "{}:{}",
                    url.host_str().unwrap_or_default(),
                    url.port_or_known_default().unwrap_or(80)
                );
                match tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(&addr)).await {
                    Ok(Ok(_)) => {}
                    _ => return Err(format!("managed identity: the endpoint {endpoint} does not answer (not an Azure machine?)")),
                }
                let redirect = ImdsRedirect {
                    to: url,
                    inner: http.clone(),
                };
                let options = ManagedIdentityCredentialOptions {
                    user_assigned_id: client_id.clone().map(UserAssignedId::ClientId),
                    client_options: ClientOptions {
                        transport: Some(Transport::new(Arc::new(redirect))),
                        ..Default::default()
                    },
                };
                Ok(ManagedIdentityCredential::new(Some(options)).map_err(fail)?)
            }
            TokenKind::Cli => Ok(AzureCliCredential::new(None).map_err(fail)?),
        }
    }
}

/// Sends azure_identity's IMDS requests (always to 169.254.169.254) to FERRY_IMDS_ENDPOINT
/// instead, so tests and unusual networks can stand in for it.
#[derive(Debug)]
struct ImdsRedirect {
    to: Url,
    inner: Arc<dyn HttpClient>,
}

#[async_trait::async_trait]
impl HttpClient for ImdsRedirect {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<AsyncRawResponse> {
        let mut req = request.clone();
        if req.url().host_str() == Some(IMDS_HOST) {
            let url = req.url_mut();
            let _ = url.set_scheme(self.to.scheme());
            let _ = url.set_host(self.to.host_str());
            let _ = url.set_port(self.to.port());
        }
        self.inner.execute_request(&req).await
    }
}

/// Signs every try with SharedKey (azure_storage_blob ships Entra ID auth only). It runs last
/// among the per-try policies that change the request (only the request counter, which changes
/// nothing, comes after), so the signature covers every header actually sent, and per try so a
/// retry gets a fresh x-ms-date.
#[derive(Debug)]
pub struct SharedKeyPolicy {
    pub account: String,
    pub key: Vec<u8>,
}

#[async_trait::async_trait]
impl Policy for SharedKeyPolicy {
    async fn send(
        &self,
        ctx: &Context,
        req: &mut Request,
        next: &[Arc<dyn Policy>],
    ) -> PolicyResult {
        req.insert_header(
            "x-ms-date",
            httpdate::fmt_http_date(std::time::SystemTime::now()),
        );
        let len = req.body().len().unwrap_or(0);
        if len > 0 {
            // reqwest would add it after signing; the signature must cover it.
            req.insert_header("content-length", len.to_string());
        }
        let sig = shared_key_signature(&self.account, &self.key, req);
        req.insert_header("authorization", sig);
        next[0].send(ctx, req, &next[1..]).await
    }
}

/// The SharedKey string-to-sign (Blob service, version 2015-02-21 and later), HMAC-SHA256'd.
pub fn shared_key_signature(account: &str, key: &[u8], req: &Request) -> String {
    let h: Vec<(String, &str)> = req
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_ascii_lowercase(), v.as_str()))
        .collect();
    let get = |name: &str| {
        h.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| *v)
            .unwrap_or("")
    };
    let content_length = match get("content-length") {
        "0" => "",
        other => other,
    };
    let mut s = String::with_capacity(256);
    s.push_str(&req.method().as_ref().to_ascii_uppercase());
    s.push('\n');
    for v in [
        get("content-encoding"),
        get("content-language"),
        content_length,
        get("content-md5"),
        get("content-type"),
        "", // Date: x-ms-date is sent instead.
        get("if-modified-since"),
        get("if-match"),
        get("if-none-match"),
        get("if-unmodified-since"),
        get("range"),
    ] {
        s.push_str(v);
        s.push('\n');
    }
    let mut ms: Vec<&(String, &str)> = h.iter().filter(|(k, _)| k.starts_with("x-ms-")).collect();
    ms.sort();
    for (k, v) in ms {
        s.push_str(k);
        s.push(':');
        s.push_str(v.trim());
        s.push('\n');
    }
    s.push('/');
    s.push_str(account);
    s.push_str(req.url().path());
    let mut params: Vec<(String, String)> = req
        .url()
        .query_pairs()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.into_owned()))
        .collect();
    params.sort();
    let mut i = 0;
    while i < params.len() {
        let name = params[i].0.clone();
        let mut values = Vec::new();
        while i < params.len() && params[i].0 == name {
            values.push(params[i].1.clone());
            i += 1;
        }
        s.push('\n');
        s.push_str(&name);
        s.push(':');
        s.push_str(&values.join(","));
    }
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(s.as_bytes());
    let sig = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    format!("SharedKey {account}:{sig}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn chain_order() {
        let all = env_of(&[
            ("AZURE_STORAGE_KEY", "a2V5"),
            ("AZURE_STORAGE_SAS_TOKEN", "sv=1"),
            ("AZURE_FEDERATED_TOKEN_FILE", "/t"),
            ("AZURE_CLIENT_ID", "c"),
            ("AZURE_TENANT_ID", "t"),
        ]);
        assert_eq!(
            choose(AuthMode::Auto, true, "a", &all).unwrap().mode,
            AuthMode::SasUrl
        );
        assert_eq!(
            choose(AuthMode::Auto, false, "a", &all).unwrap().mode,
            AuthMode::Key
        );
        let no_key = env_of(&[
            ("AZURE_STORAGE_SAS_TOKEN", "sv=1"),
            ("AZURE_CLIENT_ID", "c"),
        ]);
        assert_eq!(
            choose(AuthMode::Auto, false, "a", &no_key).unwrap().mode,
            AuthMode::Sas
        );
        let wl = env_of(&[
            ("AZURE_FEDERATED_TOKEN_FILE", "/t"),
            ("AZURE_CLIENT_ID", "c"),
            ("AZURE_TENANT_ID", "t"),
        ]);
        assert_eq!(
            choose(AuthMode::Auto, false, "a", &wl).unwrap().mode,
            AuthMode::Workload
        );
        let none = env_of(&[]);
        assert_eq!(
            choose(AuthMode::Auto, false, "a", &none).unwrap().mode,
            AuthMode::Managed
        );
        assert!(choose(AuthMode::Key, false, "a", &none).is_err());
    }

    #[test]
    fn the_secret_never_appears_in_the_description() {
        let env = env_of(&[
            ("AZURE_STORAGE_KEY", "c2VjcmV0LWtleQ=="),
            ("AZURE_STORAGE_SAS_TOKEN", "sig=SECRET"),
        ]);
        for m in [AuthMode::Key, AuthMode::Sas] {
            let c = choose(m, false, "acct", &env).unwrap();
            assert!(
                !c.detail.contains("c2VjcmV0") && !c.detail.contains("SECRET"),
                "{}",
                c.detail
            );
        }
    }

    #[test]
    fn shared_key_string_to_sign_is_stable() {
        // Same request, same key: same signature; a changed query parameter changes it.
        let key = b"0123456789abcdef";
        let mk = |q: &str| {
            let url = Url::parse(&format!(
                "http://127.0.0.1:1/acct/ctr/a%20b?comp=block&blockid={q}"
            ))
            .unwrap();
            let mut r = Request::new(url, azure_core::http::Method::Put);
            r.insert_header("x-ms-date", "Mon, 01 Jan 2024 00:00:00 GMT");
            r.insert_header("x-ms-version", "2023-11-03");
            r.insert_header("content-length", "5");
            r
        };
        let a = shared_key_signature("acct", key, &mk("AAAA"));
        assert_eq!(a, shared_key_signature("acct", key, &mk("AAAA")));
        assert_ne!(a, shared_key_signature("acct", key, &mk("AAAB")));
        assert!(a.starts_with("SharedKey acct:"));
    }

    #[test]
    fn sas_signatures_are_scrubbed_from_messages() {
        let t = scrub_sas("error sending request for url (http://127.0.0.1:9/a/c?sv=2024&sig=AbC%2Bd&sp=r): refused; sig=XYZ");
        assert_eq!(t, "error sending request for url (http://127.0.0.1:9/a/c?sv=2024&sig=REDACTED&sp=r): refused; sig=REDACTED");
    }
}
