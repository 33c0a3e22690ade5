"""A URL's query string (a signed CDN URL's signature) never reaches a message."""


from ansible_collections.pro6000.inference.plugins.module_utils._weights import errors


def test_signed_urls_lose_their_query_strings():
    text = "404 for url 'https://cdn.example/blob/abc?name=x&sig=SECRET&X-Amz-Signature=S2' then http://h/p"
    masked = errors.mask_secrets(text)
    assert "SECRET" not in masked and "S2" not in masked and "sig=" not in masked
    assert "https://cdn.example/blob/abc?<query hidden>" in masked and masked.endswith("http://h/p")
