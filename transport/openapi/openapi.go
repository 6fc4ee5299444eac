// Package openapi holds the OpenAPI 3.1 description of tether's HTTP API, which the server
// serves at GET /v1/openapi.json. openapi.json is written by hand beside the wire types
// (package wire); Document adds what comes from the code: the error codes of wire.ErrorCodes,
// and the release reasons a worker may not give (eventlog.ServerReleaseReasons).
// A test validates the result with a validator library and checks real answers of a running
// server against it, so the two cannot drift apart unnoticed.
package openapi

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/tetherhq/tether/eventlog"
	"github.com/tetherhq/tether/transport/wire"
)

//go:embed openapi.json
var handWritten []byte

// Document is the description as served: openapi.json with the Error schema's code an enum of
// the table's codes, the table itself under x-error-codes (status, retry, meaning), and a
// release's reason none of the server's own.
var Document = sync.OnceValue(func() []byte {
	doc, err := fromCode(handWritten)
	if err != nil {
		panic(err) // openapi.json is embedded and tested
	}
	return doc
})

type errorCode struct {
	Code    string `json:"code"`
	Status  int    `json:"status"`
	Retry   bool   `json:"retry"`
	Meaning string `json:"meaning"`
}

// fromCode adds to the hand-written document what comes from the code.
func fromCode(raw []byte) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	code, err := dig(doc, "components", "schemas", "Error", "properties", "error", "properties", "code")
	if err != nil {
		return nil, err
	}
	var codes []string
	var table []errorCode
	for _, c := range wire.ErrorCodes {
		codes = append(codes, c.Code)
		table = append(table, errorCode{c.Code, c.Status, c.Retry, c.Meaning})
	}
	code["enum"] = codes
	code["description"] = "A stable error code; x-error-codes gives each one's status, whether to retry, and meaning."
	doc["x-error-codes"] = table
	reason, err := dig(doc, "paths", "/v1/worker/jobs/{id}/release", "post", "requestBody", "content", "application/json", "schema", "properties", "reason")
	if err != nil {
		return nil, err
	}
	reason["not"] = map[string]any{"enum": eventlog.ServerReleaseReasons()}
	return json.MarshalIndent(doc, "", "  ")
}

// dig walks nested objects by key.
func dig(m map[string]any, keys ...string) (map[string]any, error) {
	for _, k := range keys {
		next, ok := m[k].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("openapi.json has no object at %q", k)
		}
		m = next
	}
	return m, nil
}
