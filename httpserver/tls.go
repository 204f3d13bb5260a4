package httpserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// CertificateError is a serving certificate that cannot be loaded or made.
type CertificateError struct {
	CertFile, KeyFile string // empty: a self-signed one
	Err               error
}

func (e *CertificateError) Error() string {
	if e.CertFile == "" {
		return fmt.Sprintf("self-signed serving certificate: %v", e.Err)
	}
	return fmt.Sprintf("serving certificate %s (key %s): %v", e.CertFile, e.KeyFile, e.Err)
}
func (e *CertificateError) Unwrap() error { return e.Err }

// certCheckEvery is how often CertificateFiles looks at its files.
const certCheckEvery = 10 * time.Second

// CertificateFiles is a serving certificate and key read from files, and
// read again when either file changes (a Secret volume's update, a
// cert-manager renewal): at most every 10 seconds, on the next TLS
// handshake. A change that does not load (a half-written pair) keeps the
// certificate in use and is logged.
type CertificateFiles struct {
	certFile, keyFile string
	clock             clock.PassiveClock
	log               logr.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]fileStamp
	checked time.Time
}

// fileStamp tells whether a file changed.
type fileStamp struct {
	mtime time.Time
	size  int64
	ino   uint64
}

// LoadCertificateFiles loads the PEM certificate (chain) and key. A nil
// clock is the real one.
func LoadCertificateFiles(certFile, keyFile string, clk clock.PassiveClock, log logr.Logger) (*CertificateFiles, error) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	c := &CertificateFiles{certFile: certFile, keyFile: keyFile, clock: clk, log: log}
	stamp, err := c.stamps()
	if err == nil {
		err = c.load(stamp)
	}
	if err != nil {
		return nil, &CertificateError{CertFile: certFile, KeyFile: keyFile, Err: err}
	}
	c.checked = clk.Now()
	return c, nil
}

func (c *CertificateFiles) stamps() ([2]fileStamp, error) {
	var s [2]fileStamp
	for i, p := range []string{c.certFile, c.keyFile} {
		fi, err := os.Stat(p)
		if err != nil {
			return s, err
		}
		s[i] = fileStamp{mtime: fi.ModTime(), size: fi.Size(), ino: inode(fi)}
	}
	return s, nil
}

func (c *CertificateFiles) load(stamp [2]fileStamp) error {
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return err
	}
	c.cert, c.stamp = &cert, stamp
	return nil
}

// GetCertificate is for tls.Config.GetCertificate: the certificate, read
// again first when the files changed.
func (c *CertificateFiles) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.checked) < certCheckEvery {
		return c.cert, nil
	}
	c.checked = now
	stamp, err := c.stamps()
	if err == nil && stamp == c.stamp {
		return c.cert, nil
	}
	if err == nil {
		err = c.load(stamp)
	}
	if err != nil {
		c.log.Error(&CertificateError{CertFile: c.certFile, KeyFile: c.keyFile, Err: err}, "serving certificate not reloaded; keeping the one in use")
	} else {
		c.log.Info("serving certificate reloaded", "certFile", c.certFile)
	}
	return c.cert, nil
}

// SelfSignedCertificate makes a certificate for hosts (names and IP
// addresses), signed by its own new ECDSA P-256 key and valid for a year
// from now: for a server whose clients authenticate it by other means
// or not at all (Prometheus with insecure_skip_verify), as
// controller-runtime serves its metrics when given no certificate.
func SelfSignedCertificate(hosts []string, now time.Time) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, &CertificateError{Err: err}
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, &CertificateError{Err: err}
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "nodevol self-signed"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, &CertificateError{Err: err}
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// TLSConfig is a server configuration with TLS 1.2 at least and the
// certificate getCert returns.
func TLSConfig(getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: getCert}
}
