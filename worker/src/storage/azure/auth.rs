//! Credential chain: SAS in the URL → shared key → SAS from the environment → workload
//! identity → managed identity → Azure CLI → anonymous. The first source whose inputs are
//! present wins; `--auth` forces one. Secrets are held here and never formatted anywhere.

use std::time::{Duration, Instant};

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use tokio::sync::Mutex;

use crate::error::{Result, StoreError};

const STORAGE_RESOURCE: &str = "https://storage.azure.com/";
const STORAGE_SCOPE: &str = "https://storage.azure.com/.default";
const DEFAULT_IMDS: &str = "http://169.254.169.254";
const DEFAULT_AUTHORITY: &str = "https://login.microsoftonline.com/";

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
    /// Query string appended to every request.
    Sas(String),
    SharedKey { account: String, key: Vec<u8> },
    Token(TokenSource),
}

/// Bearer tokens from one or more sources tried in order; in auto mode the chain ends in
/// anonymous access, so a public container still works on a machine with no identity.
pub struct TokenSource {
    kinds: Vec<TokenKind>,
    anonymous_last: bool,
    /// The token and its expiry; None inside means "anonymous was chosen".
    cached: Mutex<Option<(Option<String>, Instant)>>,
    http: reqwest::Client,
}

enum TokenKind {
    Workload { authority: String, tenant: String, client_id: String, token_file: String },
    Managed { endpoint: String, client_id: Option<String> },
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
pub fn choose(forced: AuthMode, url_sas: bool, account: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Choice> {
    let key_ok = present(env, "AZURE_STORAGE_KEY").is_some();
    let workload_ok = ["AZURE_FEDERATED_TOKEN_FILE", "AZURE_CLIENT_ID", "AZURE_TENANT_ID"].iter().all(|k| present(env, k).is_some());
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
            Err(StoreError::Auth(format!("--auth {} needs {what}", mode.name())))
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
            need(present(env, "AZURE_STORAGE_SAS_TOKEN").is_some(), "AZURE_STORAGE_SAS_TOKEN")?;
            "SAS token from AZURE_STORAGE_SAS_TOKEN".to_string()
        }
        AuthMode::Workload => {
            need(workload_ok, "AZURE_FEDERATED_TOKEN_FILE, AZURE_CLIENT_ID and AZURE_TENANT_ID")?;
            format!(
                "workload identity: client {} in tenant {}, token file {}",
                env("AZURE_CLIENT_ID").unwrap_or_default(),
                env("AZURE_TENANT_ID").unwrap_or_default(),
                env("AZURE_FEDERATED_TOKEN_FILE").unwrap_or_default()
            )
        }
        AuthMode::Managed => {
            let ep = present(env, "FERRY_IMDS_ENDPOINT").unwrap_or_else(|| DEFAULT_IMDS.into());
            let id = present(env, "AZURE_CLIENT_ID").map(|c| format!(", client {c}")).unwrap_or_default();
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

pub fn build(choice: &Choice, forced: AuthMode, account: &str, url_sas: Option<&str>, env: &dyn Fn(&str) -> Option<String>) -> Result<Credential> {
    let http = || {
        reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(20))
            .build()
            .map_err(|e| StoreError::Auth(format!("HTTP client: {e}")))
    };
    let chain = |kinds: Vec<TokenKind>, anonymous_last: bool| -> Result<Credential> {
        Ok(Credential::Token(TokenSource { kinds, anonymous_last, cached: Mutex::new(None), http: http()? }))
    };
    let token = |kind| chain(vec![kind], false);
    match choice.mode {
        AuthMode::SasUrl => Ok(Credential::Sas(url_sas.unwrap_or_default().to_string())),
        AuthMode::Key => {
            let key = env("AZURE_STORAGE_KEY").unwrap_or_default();
            let key = base64::engine::general_purpose::STANDARD
                .decode(key.trim())
                .map_err(|_| StoreError::Auth("AZURE_STORAGE_KEY is not valid base64".into()))?;
            Ok(Credential::SharedKey { account: account.to_string(), key })
        }
        AuthMode::Sas => Ok(Credential::Sas(env("AZURE_STORAGE_SAS_TOKEN").unwrap_or_default().trim_start_matches('?').to_string())),
        AuthMode::Workload => token(TokenKind::Workload {
            authority: present(env, "AZURE_AUTHORITY_HOST").unwrap_or_else(|| DEFAULT_AUTHORITY.into()),
            tenant: env("AZURE_TENANT_ID").unwrap_or_default(),
            client_id: env("AZURE_CLIENT_ID").unwrap_or_default(),
            token_file: env("AZURE_FEDERATED_TOKEN_FILE").unwrap_or_default(),
        }),
        AuthMode::Managed => {
            let managed = TokenKind::Managed {
                endpoint: present(env, "FERRY_IMDS_ENDPOINT").unwrap_or_else(|| DEFAULT_IMDS.into()),
                client_id: present(env, "AZURE_CLIENT_ID"),
            };
            if forced == AuthMode::Auto {
                chain(vec![managed, TokenKind::Cli], true)
            } else {
                token(managed)
            }
        }
        AuthMode::Cli => token(TokenKind::Cli),
        AuthMode::Anonymous => Ok(Credential::Anonymous),
        AuthMode::Auto => unreachable!(),
    }
}

#[derive(serde::Deserialize)]
struct TokenResponse {
    access_token: String,
    #[serde(default)]
    expires_in: Option<serde_json::Value>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct CliToken {
    access_token: String,
}

fn seconds(v: &Option<serde_json::Value>) -> u64 {
    match v {
        Some(serde_json::Value::Number(n)) => n.as_u64().unwrap_or(300),
        Some(serde_json::Value::String(s)) => s.parse().unwrap_or(300),
        _ => 300,
    }
}

/// Sends a token request and reads the OAuth answer: the token and its lifetime in seconds.
async fn token_response(what: &str, req: reqwest::RequestBuilder) -> Result<(String, u64)> {
    let fail = |e: String| StoreError::Auth(format!("{what}: {e}"));
    let resp = req.send().await.map_err(|e| fail(e.without_url().to_string()))?;
    let status = resp.status();
    if !status.is_success() {
        return Err(fail(format!("the token endpoint answered {status}")));
    }
    let body = resp.bytes().await.map_err(|e| fail(e.without_url().to_string()))?;
    let t: TokenResponse = serde_json::from_slice(&body).map_err(|e| fail(format!("unreadable token response: {e}")))?;
    Ok((t.access_token, seconds(&t.expires_in)))
}

impl TokenSource {
    /// A bearer token (refreshed five minutes before expiry), or None for anonymous access.
    pub async fn token(&self) -> Result<Option<String>> {
        let mut cached = self.cached.lock().await;
        if let Some((tok, until)) = cached.as_ref() {
            if Instant::now() + Duration::from_secs(300) < *until {
                return Ok(tok.clone());
            }
        }
        let mut errors = Vec::new();
        for kind in &self.kinds {
            match self.fetch(kind).await {
                Ok((tok, ttl)) => {
                    *cached = Some((Some(tok.clone()), Instant::now() + Duration::from_secs(ttl)));
                    return Ok(Some(tok));
                }
                Err(e) => errors.push(e.to_string()),
            }
        }
        if self.anonymous_last {
            // Decided once: probing IMDS on every request would cost seconds each.
            *cached = Some((None, Instant::now() + Duration::from_secs(365 * 86400)));
            return Ok(None);
        }
        Err(StoreError::Auth(errors.join("; ")))
    }

    async fn fetch(&self, kind: &TokenKind) -> Result<(String, u64)> {
        let fail = |what: &str, e: String| StoreError::Auth(format!("{what}: {e}"));
        match kind {
            TokenKind::Workload { authority, tenant, client_id, token_file } => {
                let assertion = std::fs::read_to_string(token_file).map_err(|e| fail("workload identity token file", e.to_string()))?;
                let url = format!("{}/{}/oauth2/v2.0/token", authority.trim_end_matches('/'), tenant);
                let form = [
                    ("grant_type", "client_credentials"),
                    ("client_id", client_id.as_str()),
                    ("scope", STORAGE_SCOPE),
                    ("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"),
                    ("client_assertion", assertion.trim()),
                ];
                let body = form
                    .iter()
                    .map(|(k, v)| format!("{k}={}", percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC)))
                    .collect::<Vec<_>>()
                    .join("&");
                let req = self.http.post(url).header("Content-Type", "application/x-www-form-urlencoded").body(body);
                token_response("workload identity", req).await
            }
            TokenKind::Managed { endpoint, client_id } => {
                let mut url = format!(
                    "{}/metadata/identity/oauth2/token?api-version=2018-02-01&resource={}",
                    endpoint.trim_end_matches('/'),
                    percent_encoding::utf8_percent_encode(STORAGE_RESOURCE, percent_encoding::NON_ALPHANUMERIC)
                );
                if let Some(c) = client_id {
                    url.push_str(&format!("&client_id={c}"));
                }
                token_response("managed identity", self.http.get(url).header("Metadata", "true")).await
            }
            TokenKind::Cli => {
                let out = tokio::process::Command::new("az")
                    .args(["account", "get-access-token", "--resource", STORAGE_RESOURCE, "--output", "json"])
                    .output()
                    .await
                    .map_err(|e| fail("Azure CLI", format!("cannot run az: {e}")))?;
                if !out.status.success() {
                    return Err(fail("Azure CLI", format!("az exited with {} (run az login)", out.status)));
                }
                let t: CliToken = serde_json::from_slice(&out.stdout).map_err(|e| fail("Azure CLI", e.to_string()))?;
                // az reports an absolute expiry in local time; refreshing every 30 minutes is
                // simpler than parsing it and well inside a token's lifetime.
                Ok((t.access_token, 1800 + 300))
            }
        }
    }
}

/// Signs a request for the SharedKey scheme (Blob service, version 2015-02-21 and later).
pub fn shared_key_signature(account: &str, key: &[u8], req: &reqwest::Request) -> String {
    let h = req.headers();
    let get = |name: &str| h.get(name).and_then(|v| v.to_str().ok()).unwrap_or("");
    let content_length = match get("content-length") {
        "0" => "",
        other => other,
    };
    let mut s = String::with_capacity(256);
    s.push_str(req.method().as_str());
    s.push('\n');
    for v in [
        get("content-encoding"),
        get("content-language"),
        content_length,
        get("content-md5"),
        get("content-type"),
        "", // Date: we send x-ms-date instead.
        get("if-modified-since"),
        get("if-match"),
        get("if-none-match"),
        get("if-unmodified-since"),
        get("range"),
    ] {
        s.push_str(v);
        s.push('\n');
    }
    let mut ms: Vec<(String, &str)> = h
        .iter()
        .filter(|(k, _)| k.as_str().starts_with("x-ms-"))
        .map(|(k, v)| (k.as_str().to_ascii_lowercase(), v.to_str().unwrap_or("")))
        .collect();
    ms.sort();
    for (k, v) in ms {
        s.push_str(&k);
        s.push(':');
        s.push_str(v.trim());
        s.push('\n');
    }
    s.push('/');
    s.push_str(account);
    s.push_str(req.url().path());
    let mut params: Vec<(String, String)> = req.url().query_pairs().map(|(k, v)| (k.to_ascii_lowercase(), v.into_owned())).collect();
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
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
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
        assert_eq!(choose(AuthMode::Auto, true, "a", &all).unwrap().mode, AuthMode::SasUrl);
        assert_eq!(choose(AuthMode::Auto, false, "a", &all).unwrap().mode, AuthMode::Key);
        let no_key = env_of(&[("AZURE_STORAGE_SAS_TOKEN", "sv=1"), ("AZURE_CLIENT_ID", "c")]);
        assert_eq!(choose(AuthMode::Auto, false, "a", &no_key).unwrap().mode, AuthMode::Sas);
        let wl = env_of(&[("AZURE_FEDERATED_TOKEN_FILE", "/t"), ("AZURE_CLIENT_ID", "c"), ("AZURE_TENANT_ID", "t")]);
        assert_eq!(choose(AuthMode::Auto, false, "a", &wl).unwrap().mode, AuthMode::Workload);
        let none = env_of(&[]);
        assert_eq!(choose(AuthMode::Auto, false, "a", &none).unwrap().mode, AuthMode::Managed);
        assert!(choose(AuthMode::Key, false, "a", &none).is_err());
    }

    #[test]
    fn the_secret_never_appears_in_the_description() {
        let env = env_of(&[("AZURE_STORAGE_KEY", "c2VjcmV0LWtleQ=="), ("AZURE_STORAGE_SAS_TOKEN", "sig=SECRET")]);
        for m in [AuthMode::Key, AuthMode::Sas] {
            let c = choose(m, false, "acct", &env).unwrap();
            assert!(!c.detail.contains("c2VjcmV0") && !c.detail.contains("SECRET"), "{}", c.detail);
        }
    }

    #[test]
    fn shared_key_string_to_sign_is_stable() {
        // Same request, same key: same signature; a changed query parameter changes it.
        let key = b"0123456789abcdef";
        let mk = |q: &str| {
            let mut r = reqwest::Request::new(reqwest::Method::PUT, format!("http://127.0.0.1:1/acct/ctr/a%20b?comp=block&blockid={q}").parse().unwrap());
            r.headers_mut().insert("x-ms-date", "Mon, 01 Jan 2024 00:00:00 GMT".parse().unwrap());
            r.headers_mut().insert("x-ms-version", "2023-11-03".parse().unwrap());
            r.headers_mut().insert("content-length", "5".parse().unwrap());
            r
        };
        let a = shared_key_signature("acct", key, &mk("AAAA"));
        assert_eq!(a, shared_key_signature("acct", key, &mk("AAAA")));
        assert_ne!(a, shared_key_signature("acct", key, &mk("AAAB")));
        assert!(a.starts_with("SharedKey acct:"));
    }
}
