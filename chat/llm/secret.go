package llm

import (
	"fmt"
	"os"
	"strings"
)

// envSecret reads a secret from the environment: the variable name, else
// the file named by name_FILE (the Docker and Kubernetes secrets
// convention), trimmed of surrounding white space. "" when neither is set.
// An unreadable file is an ErrInvalidConfig naming the variable, never the
// file's content.
func envSecret(name string) (string, error) {
	if v := os.Getenv(name); v != "" {
		return v, nil
	}
	path := os.Getenv(name + "_FILE")
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%w: %s_FILE: %w", ErrInvalidConfig, name, err)
	}
	return strings.TrimSpace(string(b)), nil
}
