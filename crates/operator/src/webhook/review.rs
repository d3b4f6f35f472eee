//! The `admission.k8s.io/v1` AdmissionReview envelope: decoded without touching the object (kept
//! raw until a handler decodes it into the type it expects), encoded with a JSON patch.

use base64::Engine;
use serde::{Deserialize, Serialize};
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
    pub patch: Option<json_patch::Patch>,
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
            self.patch = Some(patch);
        }
        self
    }

    pub fn encode(&self) -> Vec<u8> {
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
        let patch = self.patch.as_ref().map(|p| {
            let bytes = serde_json::to_vec(p).unwrap_or_default();
            base64::engine::general_purpose::STANDARD.encode(bytes)
        });
        let out = Out {
            api_version: "admission.k8s.io/v1",
            kind: "AdmissionReview",
            response: Resp {
                uid: &self.uid,
                allowed: self.allowed,
                status: (!self.allowed || self.message.is_some()).then_some(Status {
                    code: self.code,
                    message: self.message.as_deref(),
                }),
                patch_type: patch.as_ref().map(|_| "JSONPatch"),
                patch,
                warnings: &self.warnings,
            },
        };
        serde_json::to_vec(&out).unwrap_or_default()
    }
}
