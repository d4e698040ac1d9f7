package agentd

import (
	"context"
	"fmt"
)

// newOIDCVerifier verifies bearer JWTs of Config.OIDCIssuer.
func newOIDCVerifier(ctx context.Context, cfg Config) (tokenVerifier, error) {
	return nil, fmt.Errorf("%w: --oidc-issuer: not built", ErrConfig)
}
