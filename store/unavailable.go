package store

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrUnavailable is matched (errors.Is) by every error of a store that
// cannot be reached: the server refuses or drops the connection, is
// shutting down or starting up, has no connection slot left, or does not
// answer in time. The error wraps its cause, so errors.As still finds the
// driver's error. It is the one thing a caller needs to tell "try again
// later" from a real failure of the query.
var ErrUnavailable = errors.New("store unavailable")

// PingTimeout bounds Ping when the caller's context has no earlier
// deadline.
const PingTimeout = 2 * time.Second

// unavailableError is a cause classified as ErrUnavailable.
type unavailableError struct{ cause error }

func (e *unavailableError) Error() string { return "store unavailable: " + e.cause.Error() }

// Unwrap gives both the sentinel and the cause, so that errors.Is finds
// either (database/sql looks for driver.ErrBadConn to retry on a new
// connection).
func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.cause} }

// classify wraps err so that it matches ErrUnavailable when its cause says
// the database cannot be reached; any other error, and nil, is returned as
// it is.
func classify(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || !unreachable(err) {
		return err
	}
	return &unavailableError{cause: err}
}

// unreachable reports whether err says the database cannot be reached,
// from the driver's typed errors only (never their text).
func unreachable(err error) bool {
	// A connection that could not be made, whatever the reason the server
	// or the network gave (refused, timed out, shutting down, too many
	// connections, bad credentials after a password change).
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return true
	}
	// An error the server sent on an established connection: only its
	// class says whether the server is going away.
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return unavailableCode(pe.Code)
	}
	var ne net.Error // *net.OpError (refused, reset, timeout), *net.DNSError
	if errors.As(err, &ne) {
		return true
	}
	return errors.Is(err, driver.ErrBadConn) || // the connection broke before the statement went out
		errors.Is(err, io.ErrUnexpectedEOF) || // the connection was lost mid-answer
		errors.Is(err, context.DeadlineExceeded) || // no answer in time (or no free connection)
		pgconn.Timeout(err)
}

// unavailableCode reports whether a PostgreSQL SQLSTATE says the server
// cannot serve the session: class 08 (connection exception), 57P0x
// (admin_shutdown, crash_shutdown, cannot_connect_now, database_dropped,
// idle_session_timeout) and 53300 (too_many_connections).
func unavailableCode(code string) bool {
	return strings.HasPrefix(code, "08") || strings.HasPrefix(code, "57P0") || code == "53300"
}

// Ping runs SELECT 1 within PingTimeout (or ctx's earlier deadline): nil
// when the database answers, an error matching ErrUnavailable when it
// cannot be reached. Readiness's store check calls it.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, PingTimeout)
	defer cancel()
	var one int
	if err := s.db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		return fmt.Errorf("pinging the store: %w", classify(err))
	}
	return nil
}
