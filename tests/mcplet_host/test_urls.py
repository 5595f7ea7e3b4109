"""The project's own routes besides the rooms': the home page and the browser's icon."""


def test_home_is_the_dashboard(client):
    response = client.get("/")
    assert response.status_code == 302 and response.url == "/dashboard/"


def test_the_favicon_is_the_dashboards(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response.url.endswith("/dashboard/favicon.svg")
    assert client.get(response.url).status_code == 200
