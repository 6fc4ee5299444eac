package eventlog

// UnmarshalPayload is Decode by encoding/json alone, which the fast path must agree with.
var UnmarshalPayload = unmarshalPayload

// ScanPayload is Decode's path without reflection.
var ScanPayload = scanPayload
