-- name: Credit :exec
UPDATE wallets SET cents = cents + ? WHERE id = ?;

-- name: Cents :one
SELECT cents FROM wallets WHERE id = ?;
