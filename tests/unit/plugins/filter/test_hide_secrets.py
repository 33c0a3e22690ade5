from ansible_collections.pro6000.inference.plugins.filter.hide_secrets import hide_secrets

JOURNAL = ("server_args=ServerArgs(model_path='/srv/models/t', api_key='key-1234', port=30001)\n"
           "hub token hf_abcdef used; key-1234 again")


def test_every_known_secret_is_hidden_everywhere():
    text = hide_secrets(JOURNAL, ["key-1234", "hf_abcdef"])
    assert "key-1234" not in text and "hf_abcdef" not in text
    assert text.count("(hidden)") == 3
    assert "model_path='/srv/models/t'" in text


def test_empty_secrets_change_nothing():
    assert hide_secrets(JOURNAL, ["", None]) == JOURNAL


def test_a_secret_that_contains_another_is_hidden_whole():
    assert hide_secrets("abc-longer", ["abc", "abc-longer"], "*") == "*"
