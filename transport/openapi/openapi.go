// Package openapi holds the OpenAPI 3.1 description of tether's HTTP API (openapi.json), which
// the server serves at GET /v1/openapi.json. It is written by hand beside the wire types
// (package wire); a test validates it with a validator library and checks real answers of a
// running server against it, so the two cannot drift apart unnoticed.
package openapi

import _ "embed"

// JSON is the document.
//
//go:embed openapi.json
var JSON []byte
