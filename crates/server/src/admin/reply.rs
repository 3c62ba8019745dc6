//! The admin API's error answers, shared by its endpoints: a JSON
//! [`vdl_admin_api::ErrorBody`] with a 4xx/5xx status.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use vdl_admin_api::ErrorBody;

/// A JSON error answer: `{"error": message}` with `status`.
pub fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(ErrorBody::new(message))).into_response()
}

/// A JSON error answer of the stream and member endpoints, which always name the leader:
/// `{"error": message, "leader": id}` (`null` when unknown or beside the point), with `status`.
pub fn error_with_leader(status: StatusCode, message: String, leader: Option<u64>) -> Response {
    (
        status,
        Json(serde_json::json!({ "error": message, "leader": leader })),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes of both forms, as clients of every earlier release read them.
    #[tokio::test]
    async fn error_answers_keep_their_wire_form() {
        let body = |r: Response| async move {
            let bytes = axum::body::to_bytes(r.into_body(), 1 << 10).await.unwrap();
            String::from_utf8(bytes.to_vec()).unwrap()
        };
        let plain = error(StatusCode::BAD_REQUEST, "bad");
        assert_eq!(plain.status(), StatusCode::BAD_REQUEST);
        assert_eq!(body(plain).await, r#"{"error":"bad"}"#);
        let none = error_with_leader(StatusCode::NOT_FOUND, "gone".into(), None);
        assert_eq!(body(none).await, r#"{"error":"gone","leader":null}"#);
        let some = error_with_leader(StatusCode::MISDIRECTED_REQUEST, "ask 2".into(), Some(2));
        assert_eq!(some.status(), StatusCode::MISDIRECTED_REQUEST);
        assert_eq!(body(some).await, r#"{"error":"ask 2","leader":2}"#);
    }
}
