package httpserver

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	clocktesting "k8s.io/utils/clock/testing"
)

// writePair writes a new self-signed certificate and key for host as
// PEM files and returns the certificate's DER.
func writePair(t *testing.T, certFile, keyFile, host string) []byte {
	t.Helper()
	c, err := SelfSignedCertificate([]string{host}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	// As a Secret volume updates: new files, renamed into place.
	for path, block := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: c.Certificate[0]}, keyFile: {Type: "PRIVATE KEY", Bytes: key}} {
		tmp := path + ".new"
		if err := os.WriteFile(tmp, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	return c.Certificate[0]
}

// TestCertificateFilesReload: a changed pair is served from the first
// handshake 10 s later; a broken one keeps the pair in use.
func TestCertificateFilesReload(t *testing.T) {
	dir := t.TempDir()
	crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := writePair(t, crt, key, "first")
	clk := clocktesting.NewFakeClock(time.Now())
	c, err := LoadCertificateFiles(crt, key, clk, logrDiscard())
	if err != nil {
		t.Fatal(err)
	}
	served := func() []byte {
		t.Helper()
		got, err := c.GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return got.Certificate[0]
	}
	second := writePair(t, crt, key, "second")
	if !bytes.Equal(served(), first) {
		t.Error("reloaded before 10 s passed")
	}
	clk.Step(certCheckEvery)
	if !bytes.Equal(served(), second) {
		t.Error("not reloaded 10 s after the files changed")
	}
	if err := os.WriteFile(key, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	clk.Step(certCheckEvery)
	if !bytes.Equal(served(), second) {
		t.Error("a broken key replaced the certificate in use")
	}
}

func TestLoadCertificateFilesRefuses(t *testing.T) {
	dir := t.TempDir()
	crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writePair(t, crt, key, "x")
	_, err := LoadCertificateFiles(crt, crt, nil, logrDiscard())
	var ce *CertificateError
	if !errors.As(err, &ce) || ce.CertFile != crt {
		t.Errorf("a certificate as its own key: %v; want a *CertificateError", err)
	}
	if _, err := LoadCertificateFiles(filepath.Join(dir, "missing"), key, nil, logrDiscard()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing certificate: %v", err)
	}
}

// TestTLSConfigRefusesOldVersions: a TLS 1.1 client gets no connection;
// a TLS 1.2 one does.
func TestTLSConfigRefusesOldVersions(t *testing.T) {
	cert, err := SelfSignedCertificate([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := New(http.HandlerFunc(ok), Limits{})
	srv.TLSConfig = TLSConfig(func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &cert, nil })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.ServeTLS(ln, "", "")
	t.Cleanup(func() { srv.Close() })
	pool := x509.NewCertPool()
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	pool.AddCert(leaf)
	for v, want := range map[uint16]bool{tls.VersionTLS11: false, tls.VersionTLS12: true, tls.VersionTLS13: true} {
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, MinVersion: v, MaxVersion: v})
		if err == nil {
			conn.Close()
		}
		if (err == nil) != want {
			t.Errorf("TLS version %x: %v; want a connection: %v", v, err, want)
		}
	}
}

func logrDiscard() logr.Logger { return logr.Discard() }

// TestQuietLogBoundsLines: a client that fails its handshakes in a loop
// gets one log line per 10 s, whatever their number.
func TestQuietLogBoundsLines(t *testing.T) {
	var lines int
	clk := clocktesting.NewFakeClock(time.Now())
	q := &quietLog{log: funcr.New(func(string, string) { lines++ }, funcr.Options{}), clock: clk}
	for range 1000 {
		q.Write([]byte("http: TLS handshake error from 10.0.0.9:1234: EOF\n"))
	}
	clk.Step(10 * time.Second)
	q.Write([]byte("http: TLS handshake error\n"))
	if lines != 2 {
		t.Errorf("%d lines for 1001 errors over 10 s; want 2", lines)
	}
}
