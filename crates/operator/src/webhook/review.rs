//! The `admission.k8s.io/v1` AdmissionReview envelope: decoded without touching the object (kept
//! raw until a handler decodes it into the type it expects), encoded with a JSON patch.

use serde::Deserialize;
use serde_json::value::RawValue;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Review {
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub request: Option<Request>,
}

#[derive(Deserialize, Default, Debug, Clone, PartialEq, Eq)]
pub struct GroupVersionKind {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub kind: String,
}

#[derive(Deserialize, Default, Debug, Clone, PartialEq, Eq)]
pub struct GroupVersionResource {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub resource: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Request {
    pub uid: String,
    #[serde(default)]
    pub kind: GroupVersionKind,
    #[serde(default)]
    pub resource: GroupVersionResource,
    #[serde(default)]
    pub sub_resource: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    pub operation: String,
    #[serde(default)]
    pub object: Option<Box<RawValue>>,
    #[serde(default)]
    pub old_object: Option<Box<RawValue>>,
    #[serde(default)]
    pub dry_run: Option<bool>,
}

/// Why a body is not an AdmissionReview we can answer.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("the body is not a JSON AdmissionReview: {0}")]
    NotJson(serde_json::Error),
    #[error("apiVersion is {0:?}: only admission.k8s.io/v1 AdmissionReview is supported")]
    Version(String),
    #[error("kind is {0:?}: expected AdmissionReview")]
    Kind(String),
    #[error("the AdmissionReview has no request")]
    NoRequest,
    #[error("request.uid is empty")]
    NoUid,
}

pub fn decode(body: &[u8]) -> Result<Request, ReviewError> {
    let review: Review = serde_json::from_slice(body).map_err(ReviewError::NotJson)?;
    match review.api_version.as_deref() {
        Some("admission.k8s.io/v1") => {}
        other => return Err(ReviewError::Version(other.unwrap_or("").to_string())),
    }
    match review.kind.as_deref() {
        Some("AdmissionReview") => {}
        other => return Err(ReviewError::Kind(other.unwrap_or("").to_string())),
    }
    let req = review.request.ok_or(ReviewError::NoRequest)?;
    if req.uid.is_empty() {
        return Err(ReviewError::NoUid);
    }
    Ok(req)
}

/// The answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub uid: String,
    pub allowed: bool,
    pub message: Option<String>,
    pub code: u16,
    /// The JSON patch as JSON, and how many operations it has ([`Response::patch`]).
    patch: Option<(Vec<u8>, usize)>,
    pub warnings: Vec<String>,
}

impl Response {
    pub fn allow(uid: &str) -> Self {
        Response {
            uid: uid.into(),
            allowed: true,
            message: None,
            code: 200,
            patch: None,
            warnings: Vec::new(),
        }
    }

    pub fn deny(uid: &str, code: u16, message: impl Into<String>) -> Self {
        Response {
            allowed: false,
            message: Some(message.into()),
            code,
            ..Self::allow(uid)
        }
    }

    pub fn with_patch(mut self, patch: json_patch::Patch) -> Self {
        if !patch.0.is_empty() {
            // Writing into a Vec fails only for a map with non-string keys: none in a patch.
            let json = serde_json::to_vec(&patch).unwrap_or_default();
            self.patch = Some((json, patch.0.len()));
        }
        self
    }

    /// [`Response::with_patch`] with the patch already written as JSON (`ops` operations; none:
    /// no patch).
    pub fn with_patch_json(mut self, json: Vec<u8>, ops: usize) -> Self {
        if ops > 0 {
            self.patch = Some((json, ops));
        }
        self
    }

    /// The patch (`None`: the object is left as it is).
    pub fn patch(&self) -> Option<json_patch::Patch> {
        self.patch
            .as_ref()
            .and_then(|(json, _)| serde_json::from_slice(json).ok())
    }

    /// How many operations the patch has (0: none).
    pub fn patch_ops(&self) -> usize {
        self.patch.as_ref().map_or(0, |(_, ops)| *ops)
    }

    /// The AdmissionReview answering the request, as JSON: written directly (the same bytes
    /// serde_json writes for the envelope, keys in this order), the patch serialised once
    /// and base64-encoded in place.
    pub fn encode(&self) -> Vec<u8> {
        use base64::Engine;
        let patch = self.patch.as_ref().map(|(json, _)| json);
        let b64_len = patch.as_ref().map_or(0, |p| p.len().div_ceil(3) * 4);
        let mut out = Vec::with_capacity(160 + self.uid.len() + b64_len);
        out.extend_from_slice(
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"#,
        );
        json_str(&mut out, &self.uid);
        out.extend_from_slice(if self.allowed {
            br#","allowed":true"#
        } else {
            br#","allowed":false"#
        });
        if !self.allowed || self.message.is_some() {
            out.extend_from_slice(br#","status":{"code":"#);
            out.extend_from_slice(self.code.to_string().as_bytes());
            if let Some(m) = &self.message {
                out.extend_from_slice(br#","message":"#);
                json_str(&mut out, m);
            }
            out.push(b'}');
        }
        if let Some(p) = &patch {
            out.extend_from_slice(br#","patchType":"JSONPatch","patch":""#);
            let at = out.len();
            out.resize(at + b64_len, 0);
            let written = base64::engine::general_purpose::STANDARD
                .encode_slice(p, &mut out[at..])
                .unwrap_or(0);
            out.truncate(at + written);
            out.push(b'"');
        }
        if !self.warnings.is_empty() {
            out.extend_from_slice(br#","warnings":"#);
            let _ = serde_json::to_writer(&mut out, &self.warnings);
        }
        out.extend_from_slice(b"}}");
        out
    }
}

/// `s` as a JSON string, as serde_json writes it.
fn json_str(out: &mut Vec<u8>, s: &str) {
    let _ = serde_json::to_writer(out, s);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;

    /// The envelope as serde_json writes it from derived types (the encoder before it was
    /// written by hand): the reference [`Response::encode`] must match byte for byte.
    fn reference(r: &Response) -> Vec<u8> {
        use base64::Engine;
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Status<'a> {
            code: u16,
            #[serde(skip_serializing_if = "Option::is_none")]
            message: Option<&'a str>,
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Resp<'a> {
            uid: &'a str,
            allowed: bool,
            #[serde(skip_serializing_if = "Option::is_none")]
            status: Option<Status<'a>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            patch_type: Option<&'static str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            patch: Option<String>,
            #[serde(skip_serializing_if = "<[String]>::is_empty")]
            warnings: &'a [String],
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Out<'a> {
            api_version: &'static str,
            kind: &'static str,
            response: Resp<'a>,
        }
        let patch = r.patch().map(|p| {
            base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&p).unwrap())
        });
        serde_json::to_vec(&Out {
            api_version: "admission.k8s.io/v1",
            kind: "AdmissionReview",
            response: Resp {
                uid: &r.uid,
                allowed: r.allowed,
                status: (!r.allowed || r.message.is_some()).then_some(Status {
                    code: r.code,
                    message: r.message.as_deref(),
                }),
                patch_type: patch.as_ref().map(|_| "JSONPatch"),
                patch,
                warnings: &r.warnings,
            },
        })
        .unwrap()
    }

    #[test]
    fn the_encoded_review_is_what_serde_json_writes() {
        let patch = |n: usize| -> json_patch::Patch {
            serde_json::from_value(serde_json::Value::Array(
                (0..n)
                    .map(|i| serde_json::json!({"op": "add", "path": format!("/metadata/annotations/k{i}"),
                        "value": "v\"\\\n\u{1}é".repeat(i)}))
                    .collect(),
            ))
            .unwrap()
        };
        let mut cases = vec![
            Response::allow("u"),
            Response::allow("uid \"quoted\" \\ \n\t\u{7f}\u{0}é😀"),
            Response::deny("u", 400, "bad: \"x\"\n"),
            Response::deny("", 503, ""),
        ];
        for n in 1..6 {
            cases.push(Response::allow("u").with_patch(patch(n)));
        }
        let mut with_message = Response::allow("u").with_patch(patch(2));
        with_message.message = Some("note".into());
        with_message.warnings = vec!["w1".into(), "w \"2\"".into()];
        cases.push(with_message);
        let mut warned = Response::allow("u");
        warned.warnings = vec!["only".into()];
        cases.push(warned);
        for r in &cases {
            assert_eq!(
                String::from_utf8(r.encode()).unwrap(),
                String::from_utf8(reference(r)).unwrap(),
                "{r:?}"
            );
        }
    }
}
