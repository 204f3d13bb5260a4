// Package slowclient holds the HTTP clients that tests set against
// nodevol's HTTP servers to check their limits: one that keeps a
// keep-alive connection idle, one that sends its request header or body
// a byte at a time, one with a huge header, one that connects and sends
// nothing. Each reports whether the server ended it; none needs root.
// The ...Via forms take the Dialer that opens the connection: TLS for a
// server that speaks only TLS.
package slowclient

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"
)

// ErrHeld is matched by the error of a check whose connection the server
// still held when the wait ran out.
var ErrHeld = errors.New("the server still holds the connection")

// Idle sends "GET path" to addr on a new connection, reads the answer,
// which must keep the connection alive, then leaves the connection idle
// and waits up to wait for the server to close it.
func Idle(addr, path string, wait time.Duration) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path); err != nil {
		return err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		return fmt.Errorf("GET %s: the server closed the connection after one request; want keep-alive", path)
	}
	return waitClosed(conn, br, wait, "idle after one request")
}

// Dialer opens a check's connection to addr.
type Dialer func(addr string) (net.Conn, error)

// TCP is the Dialer of a plain connection.
func TCP(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }

// TLS is the Dialer of a TLS connection, its handshake done, whatever
// certificate the server has: the slow client is past TLS, at HTTP.
func TLS(addr string) (net.Conn, error) {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		return nil, err
	}
	return conn, nil
}

// Silent connects to addr and sends nothing, not even a TLS
// ClientHello, and waits up to wait for the server to close the
// connection.
func Silent(addr string, wait time.Duration) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	return waitClosed(conn, bufio.NewReader(conn), wait, "that sends nothing")
}

// SlowHeader sends a request header for path to addr a byte every
// interval, and waits up to wait for the server to close the connection.
func SlowHeader(addr, path string, every, wait time.Duration) error {
	return SlowHeaderVia(TCP, addr, path, every, wait)
}

// SlowHeaderVia is SlowHeader on a connection dial opens.
func SlowHeaderVia(dial Dialer, addr, path string, every, wait time.Duration) error {
	head := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: x\r\nX-Slow: %0512d\r\n\r\n", path, 0)
	return trickle(dial, addr, "", head, every, wait, "sending its header a byte every "+every.String())
}

// SlowBody sends "POST path" to addr with a header that announces a body
// of 64 KiB (small enough for net/http to read the rest after the
// handler, to keep the connection), then the body a byte every interval,
// and waits up to wait for the server to close the connection. The
// server may answer meanwhile: the connection is what counts.
func SlowBody(addr, path string, every, wait time.Duration) error {
	return SlowBodyVia(TCP, addr, path, every, wait)
}

// SlowBodyVia is SlowBody on a connection dial opens.
func SlowBodyVia(dial Dialer, addr, path string, every, wait time.Duration) error {
	const size = 64 << 10
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n", path, size)
	body := string(make([]byte, size))
	return trickle(dial, addr, head, body, every, wait, "sending its body a byte every "+every.String())
}

// LargeHeader sends "GET path" to addr with a header of size bytes, and
// returns nil when the server refuses it: 431, or the connection closed
// before the client has written it all (net/http answers 431 and closes
// without reading on).
func LargeHeader(addr, path string, size int) error {
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Junk", strings.Repeat("a", size))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil // refused before the client wrote it all
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		return fmt.Errorf("GET %s with a header of %d bytes = %d; want 431", path, size, resp.StatusCode)
	}
	return nil
}

// trickle writes head at once, then slow a byte every interval, until the
// server closes the connection or wait runs out.
func trickle(dial Dialer, addr, head, slow string, every, wait time.Duration, what string) error {
	conn, err := dial(addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, head); err != nil {
		return err
	}
	closed := make(chan error, 1)
	go func() { closed <- waitClosed(conn, bufio.NewReader(conn), wait, what) }()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case err := <-closed:
			return err
		case <-tick.C:
		}
		if i < len(slow) {
			// A write after the server closed fails or is lost: the
			// reader says which it was.
			_, _ = io.WriteString(conn, slow[i:i+1])
		}
	}
}

// waitClosed reads what the server sends until it closes the connection
// (nil) or wait runs out (ErrHeld).
func waitClosed(conn net.Conn, br *bufio.Reader, wait time.Duration, what string) error {
	if err := conn.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return err
	}
	_, err := io.Copy(io.Discard, br)
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return fmt.Errorf("%w after %v of a client %s", ErrHeld, wait, what)
	case err == nil, errors.Is(err, net.ErrClosed), isReset(err), isTLSLocal(err):
		return nil
	}
	return fmt.Errorf("reading from the server: %w", err)
}

// isReset reports whether err is a connection reset: a server that closes
// a connection with unread data in it resets it.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// isTLSLocal reports whether err is an alert this end of a TLS connection
// raised on what the server sent last: net/http's server that ends a
// connection at its write deadline sends its close_notify under a record
// number the client does not expect ("bad record MAC"). The server ended
// the connection all the same.
func isTLSLocal(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "local error"
}
