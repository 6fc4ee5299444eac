package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// TLSConfigWithCA returns a TLS client configuration that trusts the certificates in the PEM
// file caFile (a private CA) besides the system's roots. Certificates are always verified.
func TLSConfigWithCA(caFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca-cert: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--ca-cert %s holds no PEM certificate", caFile)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, nil
}

// NewHTTPClient returns an HTTP client as New makes one, with tlsConfig (nil: the system's). A
// server that does not take the connection in dialTimeout (a machine gone, a partition) counts
// as unreachable, so a client of several servers moves on; how long an answer may take is each
// request's own (Client.do).
func NewHTTPClient(tlsConfig *tls.Config) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         (&net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsConfig,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
	}}
}

// dialTimeout bounds a connection's making; requestTimeout an API call's answer, on top of the
// time a long poll asks the server to wait.
const (
	dialTimeout    = 5 * time.Second
	requestTimeout = 10 * time.Second
)

// CertificateRefused reports whether err is the server's certificate failing verification: a
// misconfiguration (a private CA not given, a name that does not match, an expired
// certificate), not a network fault that retrying mends.
func CertificateRefused(err error) bool {
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var verify *tls.CertificateVerificationError
	return errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &verify)
}
