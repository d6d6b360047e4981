package main

import (
	"errors"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// maxErrors caps the error entries a report lists; errors_total counts all of them.
const maxErrors = 20

// apiError is one failed request as the report shows it.
type apiError struct {
	Subject string `json:"subject,omitempty"` // the object, e.g. a lease name
	Op      string `json:"op"`                // what was attempted: update, get, watch, ...
	Code    int32  `json:"code"`              // HTTP status; 0 when no response arrived
	Reason  string `json:"reason"`            // metav1.StatusReason
	Message string `json:"message"`
}

// describeError extracts the Status of an API error, or the plain error text (code 0) for
// errors that carry none (transport, decoding).
func describeError(err error) (code int32, reason, message string) {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		s := status.Status()
		return s.Code, string(s.Reason), s.Message
	}
	return 0, "", err.Error()
}

func newAPIError(subject, op string, err error) apiError {
	code, reason, message := describeError(err)
	return apiError{Subject: subject, Op: op, Code: code, Reason: reason, Message: message}
}

// errorLog keeps the first maxErrors errors and counts all of them. Safe for concurrent use.
type errorLog struct {
	mu      sync.Mutex
	entries []apiError
	total   int
}

func (l *errorLog) add(e apiError) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total++
	if len(l.entries) < maxErrors {
		l.entries = append(l.entries, e)
	}
}

// snapshot returns the kept entries (never nil, so JSON shows []) and the total.
func (l *errorLog) snapshot() ([]apiError, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]apiError{}, l.entries...), l.total
}
