//! Fuzz target: request parsing and validation. Any bytes are parsed or refused naming a field, never a
//! panic; an accepted request survives the trip through its queue body unchanged.
#![no_main]

use gpuinfer::{InferenceRequest, Intake, RequestError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for id in [Intake::Api(chrono::Utc::now()), Intake::Queue(chrono::Utc::now())] {
        match InferenceRequest::parse(data, id) {
            Ok(request) => {
                let queued = request.to_queue_body();
                let again = InferenceRequest::parse(queued.as_bytes(), Intake::Queue(chrono::Utc::now()));
                assert_eq!(again.as_ref(), Ok(&request), "{queued}");
            }
            Err(RequestError::Invalid { field, problem }) => assert!(!field.is_empty() && !problem.is_empty()),
            Err(RequestError::TooLarge { size, limit }) => assert!(size > limit),
            Err(RequestError::QueueMessageTooLarge { queued, limit }) => assert!(queued > limit),
        }
    }
});
