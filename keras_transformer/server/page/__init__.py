"""The web page at `/` on the REST port (`web_page`, its files in `web/`)."""
