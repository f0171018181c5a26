//! The stand-in's failures in each service's own wire shape: SQS's awsJson1_0 error body with its query-compatible
//! error header, and S3's REST-XML `<Error>` document.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::wire::xml_escape;

/// An SQS error as the awsJson1_0 protocol carries it. SQS documents ("Interpreting Amazon SQS JSON API responses"):
/// HTTP 400, `x-amzn-query-error: <code>;Sender` (the code its older query protocol used, which the SDK matches on),
/// and a body `{"__type": "com.amazonaws.sqs#<Shape>", "message": "…"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SqsError {
    /// The error's shape in the SQS model (`QueueDoesNotExist`).
    pub shape: &'static str,
    /// Its query-protocol code (`AWS.SimpleQueueService.NonExistentQueue`): the code a batch entry's failure names.
    pub code: &'static str,
    pub message: String,
}

impl SqsError {
    fn new(shape: &'static str, code: &'static str, message: impl Into<String>) -> Self {
        SqsError { shape, code, message: message.into() }
    }

    pub(crate) fn queue_does_not_exist() -> Self {
        Self::new("QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist.")
    }

    pub(crate) fn queue_already_exists(attribute: &str) -> Self {
        let message =
            format!("A queue already exists with the same name and a different value for attribute {attribute}");
        Self::new("QueueNameExists", "QueueAlreadyExists", message)
    }

    pub(crate) fn receipt_handle_is_invalid(handle: &str) -> Self {
        let message = format!("The input receipt handle \"{handle}\" is not a valid receipt handle.");
        Self::new("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", message)
    }

    pub(crate) fn message_not_inflight() -> Self {
        Self::new("MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight", "The message is not in flight.")
    }

    /// A parameter outside what SQS takes (SQS's common errors: InvalidParameterValue, 400).
    pub(crate) fn invalid_parameter_value(message: impl Into<String>) -> Self {
        Self::new("InvalidParameterValue", "InvalidParameterValue", message)
    }

    /// A required parameter left out (SQS's common errors: MissingParameter, 400).
    pub(crate) fn missing_parameter(name: &str) -> Self {
        Self::new("MissingParameter", "MissingParameter", format!("The request must contain the parameter {name}."))
    }

    pub(crate) fn invalid_attribute_name(name: &str) -> Self {
        Self::new("InvalidAttributeName", "InvalidAttributeName", format!("Unknown Attribute {name}."))
    }

    pub(crate) fn invalid_attribute_value(name: &str, why: &str) -> Self {
        let message = format!("Invalid value for the parameter {name}. Reason: {why}");
        Self::new("InvalidAttributeValue", "InvalidAttributeValue", message)
    }

    pub(crate) fn invalid_message_contents(message: impl Into<String>) -> Self {
        Self::new("InvalidMessageContents", "InvalidMessageContents", message)
    }

    pub(crate) fn empty_batch_request(entry: &str) -> Self {
        let message = format!("There should be at least one {entry} in the request.");
        Self::new("EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest", message)
    }

    /// More than 10 entries: SQS takes at most 10 per SendMessageBatch, DeleteMessageBatch or
    /// ChangeMessageVisibilityBatch ("TooManyEntriesInBatchRequest").
    pub(crate) fn too_many_entries(sent: usize) -> Self {
        let message = format!("Maximum number of entries per request are 10. You have sent {sent}.");
        Self::new("TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", message)
    }

    pub(crate) fn ids_not_distinct(id: &str) -> Self {
        let message = format!("Id {id} repeated.");
        Self::new("BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", message)
    }

    pub(crate) fn invalid_batch_entry_id() -> Self {
        let message = "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long.";
        Self::new("InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId", message)
    }

    pub(crate) fn batch_request_too_long(limit: usize) -> Self {
        let message = format!("Batch requests cannot be longer than {limit} bytes.");
        Self::new("BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong", message)
    }

    /// An operation of SQS that this stand-in does not serve (the project calls none of them).
    pub(crate) fn unsupported(operation: &str) -> Self {
        let message = format!("{operation} is not served by the AWS stand-in (only the calls gpuinfer makes are)");
        Self::new("UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", message)
    }

    /// A body that is not a JSON object of the operation's input.
    pub(crate) fn malformed(why: impl std::fmt::Display) -> Self {
        Self::new("InvalidParameterValue", "InvalidParameterValue", format!("The request body is not valid: {why}"))
    }
}

impl IntoResponse for SqsError {
    fn into_response(self) -> Response {
        let body =
            serde_json::json!({ "__type": format!("com.amazonaws.sqs#{}", self.shape), "message": self.message });
        let mut response = (StatusCode::BAD_REQUEST, body.to_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-amz-json-1.0"));
        if let Ok(value) = HeaderValue::from_str(&format!("{};Sender", self.code)) {
            headers.insert("x-amzn-query-error", value);
        }
        response
    }
}

/// An S3 error as REST-XML carries it: the status and `<Error><Code>…</Code><Message>…</Message>…</Error>`
/// (S3 API reference, "Error responses"); a HEAD request gets the status alone, as S3 sends no body to HEAD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct S3Error {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// One more element naming what failed (`Key`, `BucketName`, `Condition`, …).
    pub detail: Option<(&'static str, String)>,
}

impl S3Error {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        S3Error { status, code, message: message.into(), detail: None }
    }

    fn with(mut self, element: &'static str, value: &str) -> Self {
        self.detail = Some((element, value.to_owned()));
        self
    }

    pub(crate) fn no_such_bucket(bucket: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NoSuchBucket", "The specified bucket does not exist")
            .with("BucketName", bucket)
    }

    pub(crate) fn no_such_key(key: &str) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NoSuchKey", "The specified key does not exist.").with("Key", key)
    }

    pub(crate) fn no_such_upload(upload_id: &str) -> Self {
        let message = "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed.";
        Self::new(StatusCode::NOT_FOUND, "NoSuchUpload", message).with("UploadId", upload_id)
    }

    /// A conditional write that found its condition false: 412 PreconditionFailed (S3 User Guide, "Conditional
    /// writes": with `If-None-Match: *`, a key that exists).
    pub(crate) fn precondition_failed(condition: &str) -> Self {
        let message = "At least one of the pre-conditions you specified did not hold";
        Self::new(StatusCode::PRECONDITION_FAILED, "PreconditionFailed", message).with("Condition", condition)
    }

    pub(crate) fn bucket_already_owned(bucket: &str) -> Self {
        let message = "Your previous request to create the named bucket succeeded and you already own it.";
        Self::new(StatusCode::CONFLICT, "BucketAlreadyOwnedByYou", message).with("BucketName", bucket)
    }

    pub(crate) fn invalid_bucket_name(bucket: &str) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "InvalidBucketName", "The specified bucket is not valid.")
            .with("BucketName", bucket)
    }

    pub(crate) fn invalid_argument(message: impl Into<String>, name: &str) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "InvalidArgument", message).with("ArgumentName", name)
    }

    pub(crate) fn invalid_range(size: usize) -> Self {
        let message = "The requested range is not satisfiable";
        Self::new(StatusCode::RANGE_NOT_SATISFIABLE, "InvalidRange", message)
            .with("ActualObjectSize", &size.to_string())
    }

    pub(crate) fn bad_digest() -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadDigest", "The Content-MD5 you specified did not match what we received.")
    }

    pub(crate) fn invalid_digest() -> Self {
        Self::new(StatusCode::BAD_REQUEST, "InvalidDigest", "The Content-MD5 you specified is not valid.")
    }

    pub(crate) fn malformed_xml() -> Self {
        let message = "The XML you provided was not well-formed or did not validate against our published schema";
        Self::new(StatusCode::BAD_REQUEST, "MalformedXML", message)
    }

    pub(crate) fn invalid_part(number: u32) -> Self {
        let message = "One or more of the specified parts could not be found. The part may not have been uploaded, or the specified entity tag may not match the part's entity tag.";
        Self::new(StatusCode::BAD_REQUEST, "InvalidPart", message).with("PartNumber", &number.to_string())
    }

    pub(crate) fn invalid_part_order() -> Self {
        let message =
            "The list of parts was not in ascending order. The parts list must be specified in order by part number.";
        Self::new(StatusCode::BAD_REQUEST, "InvalidPartOrder", message)
    }

    pub(crate) fn entity_too_small(number: u32) -> Self {
        let message = "Your proposed upload is smaller than the minimum allowed object size.";
        Self::new(StatusCode::BAD_REQUEST, "EntityTooSmall", message).with("PartNumber", &number.to_string())
    }

    pub(crate) fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "InvalidRequest", message)
    }

    /// A request this stand-in does not serve (the project makes none like it): S3's own answer to a feature it
    /// lacks, 501 NotImplemented.
    pub(crate) fn not_implemented(what: &str) -> Self {
        let message = format!("{what} is not served by the AWS stand-in (only the calls gpuinfer makes are)");
        Self::new(StatusCode::NOT_IMPLEMENTED, "NotImplemented", message)
    }

    /// The response, without a body for a HEAD request.
    pub(crate) fn respond(self, head: bool) -> Response {
        if head {
            return self.status.into_response();
        }
        let detail = self.detail.map(|(name, value)| format!("<{name}>{}</{name}>", xml_escape(&value)));
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{}</Code><Message>{}</Message>{}</Error>",
            self.code,
            xml_escape(&self.message),
            detail.unwrap_or_default()
        );
        (self.status, [(header::CONTENT_TYPE, "application/xml")], body).into_response()
    }
}
